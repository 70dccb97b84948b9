// MCP servers: each server's live state (connected with its tool count, or the error it gave),
// add or remove a server, and import a Claude Desktop {"mcpServers": {...}} block as pasted.
// Servers live in the setting plugin.mcp.servers; a change reloads the mcp plugin.
import { api } from "../api.js";
import { clear, h, toast } from "../dom.js";
import { t } from "../i18n.js";

const KEY = "plugin.mcp.servers";

// a command line as a shell would split it for the simple cases: spaces, and "…" or '…' around an argument
export function splitArgs(text) {
  const out = [];
  const re = /"((?:[^"\\]|\\.)*)"|'([^']*)'|(\S+)/g;
  let m;
  while ((m = re.exec(text)) !== null) out.push(m[1] !== undefined ? m[1].replace(/\\(.)/g, "$1") : m[2] !== undefined ? m[2] : m[3]);
  return out;
}

// the stored setting (our list, or a pasted Claude Desktop object) as a list of entries
function asList(value) {
  let raw = value;
  if (typeof raw === "string") { try { raw = JSON.parse(raw || "[]"); } catch { return []; } }
  if (Array.isArray(raw)) return raw;
  if (raw && typeof raw === "object") {
    const inner = raw.mcpServers && typeof raw.mcpServers === "object" ? raw.mcpServers : raw;
    return Object.entries(inner).map(([name, spec]) => ({ ...spec, name }));
  }
  return [];
}

export async function mount(root) {
  const table = h("tbody", { id: "mcp-servers" });
  const problems = h("div", { id: "mcp-problems" });
  const name = h("input", { type: "text", id: "mcp-name", placeholder: "files" });
  const target = h("input", { type: "text", id: "mcp-target", placeholder: "npx -y @modelcontextprotocol/server-filesystem /home/me  —  or  https://host/mcp" });
  const env = h("textarea", { id: "mcp-env", rows: 2, placeholder: "API_KEY=…" });
  const paste = h("textarea", { id: "mcp-import", rows: 8, placeholder: '{"mcpServers": {"name": {"command": "npx", "args": ["…"]}}}' });
  const importResult = h("p", { id: "mcp-import-result", class: "small" });
  root.append(h("div", { class: "toolbar" }, h("h1", {}, t("nav.mcp")),
    h("button", { class: "ghost", onclick: () => load() }, t("common.refresh"))),
  h("div", { class: "table-wrap" }, h("table", { class: "table", id: "mcp-table" },
    h("thead", {}, h("tr", {}, h("th", {}, t("setup.name")), h("th", {}, t("mcp.target")),
      h("th", {}, t("plugins.state")), h("th", {}, t("overview.tools")), h("th", {}, ""))), table)), problems,
  h("form", { class: "card setup-form", id: "mcp-add-form", onsubmit: (ev) => { ev.preventDefault(); add(); } },
    h("h2", {}, t("mcp.add")),
    h("label", { class: "field" }, h("span", {}, t("setup.name")), name),
    h("label", { class: "field" }, h("span", {}, t("mcp.command_or_url")), target),
    h("label", { class: "field" }, h("span", {}, t("mcp.env")), env),
    h("div", { class: "row" }, h("button", { type: "submit", class: "primary", id: "mcp-add" }, t("mcp.add_button")))),
  h("div", { class: "card setup-form mcp-import" }, h("h2", {}, t("mcp.import")),
    h("p", { class: "muted small" }, t("mcp.import_help")), paste,
    h("div", { class: "row" }, h("button", { class: "primary", id: "mcp-import-button", onclick: () => importBlock() }, t("mcp.import_button"))),
    importResult));

  let servers = [];

  async function stored() {
    const data = await api("GET", "/api/v1/settings");
    for (const cat of data.categories) for (const s of cat.settings) if (s.key === KEY) return asList(s.value);
    return [];
  }

  async function save(list) {
    await api("PUT", "/api/v1/settings", { [KEY]: JSON.stringify(list) });
    await api("POST", "/api/v1/plugins/mcp/reload");
    setTimeout(load, 1500);
    await load();
  }

  async function load() {
    let health = {};
    try {
      servers = await stored();
      const info = await api("GET", "/api/v1/plugins/mcp");
      health = info.health || {};
      if (info.state && info.state !== "running") problems.replaceChildren(h("p", { class: "notice" }, t("mcp.plugin_state", { state: info.state, error: info.error || "" })));
      else clear(problems);
    } catch (err) {
      clear(problems).append(h("p", { class: err.status === 501 ? "notice" : "error" },
        err.status === 501 ? t("common.unavailable", { msg: err.body.missing || err.message }) : t("common.error", { msg: err.message })));
    }
    const live = health.servers || {};
    clear(table);
    for (const s of servers) {
      const st = live[s.name] || { state: "stopped", tools: 0, error: "" };
      const ok = st.state === "connected";
      table.append(h("tr", { dataset: { server: s.name } },
        h("td", {}, h("b", {}, s.name)),
        h("td", { class: "wrap" }, h("code", {}, s.url || [s.command, ...(s.args || [])].join(" ")),
          s.env && Object.keys(s.env).length ? h("div", { class: "muted small" }, `env: ${Object.keys(s.env).join(", ")}`) : null),
        h("td", {}, h("span", { class: `badge ${ok ? "ok" : st.error ? "error" : ""}` }, t(`mcp.state.${st.state}`)),
          st.error ? h("div", { class: "error small wrap mcp-error" }, st.error) : null),
        h("td", {}, String(st.tools || 0)),
        h("td", { class: "actions" }, h("button", { class: "small danger", onclick: async () => {
          if (!confirm(t("mcp.confirm_remove", { name: s.name }))) return;
          try { await save(servers.filter((x) => x.name !== s.name)); } catch (err) { toast(err.message, "error"); }
        } }, t("plugins.remove")))));
    }
    if (!servers.length) table.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, t("mcp.none"))));
    for (const p of health.problems || []) problems.append(h("p", { class: "error small" }, p));
  }

  function parseEnv(text) {
    const out = {};
    for (const line of text.split("\n")) {
      const cut = line.indexOf("=");
      if (cut > 0) out[line.slice(0, cut).trim()] = line.slice(cut + 1).trim();
    }
    return out;
  }

  async function add() {
    const n = name.value.trim();
    const tgt = target.value.trim();
    if (!n || !tgt) { toast(t("mcp.need_fields"), "error"); return; }
    if (servers.some((s) => s.name === n)) { toast(t("mcp.exists", { name: n }), "error"); return; }
    const entry = /^https?:\/\//.test(tgt) ? { name: n, url: tgt } : (() => {
      const parts = splitArgs(tgt);
      return { name: n, command: parts[0], args: parts.slice(1) };
    })();
    const vars = parseEnv(env.value);
    if (Object.keys(vars).length) entry.env = vars;
    try { await save([...servers, entry]); name.value = ""; target.value = ""; env.value = ""; toast(t("common.saved")); }
    catch (err) { toast(err.message, "error"); }
  }

  async function importBlock() {
    let parsed;
    try { parsed = JSON.parse(paste.value); } catch (err) {
      importResult.className = "small error"; importResult.textContent = t("mcp.not_json", { msg: err.message }); return;
    }
    const incoming = asList(parsed);
    if (!incoming.length) { importResult.className = "small error"; importResult.textContent = t("mcp.nothing"); return; }
    const names = new Set(incoming.map((s) => s.name));
    const merged = [...servers.filter((s) => !names.has(s.name)), ...incoming];
    try {
      await save(merged);
      importResult.className = "small ok";
      importResult.textContent = t("mcp.imported", { n: incoming.length, names: [...names].join(", ") });
      paste.value = "";
    } catch (err) {
      importResult.className = "small error";
      importResult.textContent = err.body && err.body.errors ? Object.values(err.body.errors).join("; ") : err.message;
    }
  }

  await load();
  const timer = setInterval(load, 5000);
  return () => clearInterval(timer);
}
