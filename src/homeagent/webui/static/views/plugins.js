// Plugin manager: state and health of each plugin; enable, disable, reload, remove; install a .hmap.
import { ApiError, api } from "../api.js";
import { clear, h, pretty, toast } from "../dom.js";
import { t } from "../i18n.js";

function field(p, ...names) {
  for (const n of names) if (p[n] !== undefined && p[n] !== null && p[n] !== "") return p[n];
  return "";
}

export async function mount(root) {
  const body = h("div", { id: "plugins-body" });
  const file = h("input", { type: "file", accept: ".hmap,.zip", id: "plugin-file" });
  const install = h("button", { class: "primary", id: "plugin-install" }, t("plugins.install"));
  root.append(h("div", { class: "toolbar" }, h("h1", {}, t("nav.plugins")), file, install,
    h("button", { class: "ghost", onclick: () => load() }, t("common.refresh"))), body);

  async function act(name, action) {
    if (action === "remove" && !confirm(t("plugins.confirm_remove", { name }))) return;
    try {
      if (action === "remove") await api("DELETE", `/api/v1/plugins/${encodeURIComponent(name)}`);
      else await api("POST", `/api/v1/plugins/${encodeURIComponent(name)}/${action}`);
      toast(`${name}: ${action} ✓`);
    } catch (err) { toast(err.message, "error"); }
    load();
  }

  async function load() {
    clear(body).append(h("p", { class: "muted" }, t("common.loading")));
    let data;
    try { data = await api("GET", "/api/v1/plugins"); } catch (err) {
      clear(body).append(h("p", { class: err.status === 501 ? "notice" : "error" },
        err.status === 501 ? t("common.unavailable", { msg: err.body.missing || err.message }) : t("common.error", { msg: err.message })));
      return;
    }
    const plugins = data.plugins || [];
    if (!plugins.length) { clear(body).append(h("p", { class: "muted" }, t("plugins.none"))); return; }
    const rows = plugins.map((p) => {
      const name = field(p, "name");
      const enabled = !(p.disabled === true || p.enabled === false);
      const state = String(field(p, "state", "status"));
      const stateText = t(`state.${state}`) === `state.${state}` ? state : t(`state.${state}`);
      const details = p.health && typeof p.health === "object" ? p.health : null;
      return h("tr", { dataset: { plugin: name } },
        h("td", {}, h("b", {}, name), h("div", { class: "muted small" }, field(p, "description"))),
        h("td", {}, String(field(p, "version"))),
        h("td", {}, String(field(p, "kind", "type"))),
        h("td", {}, h("span", { class: `badge ${/^(running|ok)$/.test(state) ? "ok" : /fail|error|crash/i.test(state) ? "error" : ""}` }, stateText || "—"),
          p.error ? h("div", { class: "error small wrap" }, String(p.error)) : null,
          details ? h("details", { class: "small" }, h("summary", {}, t("plugins.details")), h("pre", {}, pretty(details))) : null),
        h("td", { class: "actions" },
          enabled ? h("button", { class: "small", onclick: () => act(name, "disable") }, t("plugins.disable"))
            : h("button", { class: "small", onclick: () => act(name, "enable") }, t("plugins.enable")),
          h("button", { class: "small", onclick: () => act(name, "reload") }, t("plugins.reload")),
          p.builtin ? null : h("button", { class: "small danger", onclick: () => act(name, "remove") }, t("plugins.remove"))));
    });
    clear(body).append(h("div", { class: "table-wrap" }, h("table", { class: "table plugins-table" },
      h("thead", {}, h("tr", {}, ...["plugins.name", "plugins.version", "plugins.kind", "plugins.health", ""].map((k) => h("th", {}, k ? t(k) : "")))),
      h("tbody", {}, rows))));
  }

  install.addEventListener("click", async () => {
    if (!file.files.length) { file.click(); return; }
    const form = new FormData();
    form.append("file", file.files[0], file.files[0].name);
    try { await api("POST", "/api/v1/plugins", form); toast(t("common.saved")); file.value = ""; }
    catch (err) { toast(err instanceof ApiError ? err.message : String(err), "error"); }
    load();
  });

  await load();
}
