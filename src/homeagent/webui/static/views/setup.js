// LLM sources: the first-run page (no LLM configured yet) and, later, where sources are added,
// tested, put in fallback order and removed. A form is tested as typed, before anything is saved,
// through the same code path as `homeagent llm test`.
import { api } from "../api.js";
import { clear, h, toast } from "../dom.js";
import { t } from "../i18n.js";

function badge(state) {
  const cls = state === "ok" ? "ok" : state === "disabled" ? "error" : "";
  return h("span", { class: `badge ${cls}` }, t(`setup.state.${state}`) || state);
}

export async function mount(root) {
  const intro = h("div", { class: "notice", id: "setup-first-run", hidden: true }, t("setup.first_run"));
  const table = h("tbody", { id: "setup-sources" });
  const notes = h("div", { class: "muted small", id: "setup-notes" });
  const provider = h("select", { id: "setup-provider" });
  const name = h("input", { type: "text", id: "setup-name", autocomplete: "off" });
  const baseUrl = h("input", { type: "url", id: "setup-base-url", autocomplete: "off" });
  const model = h("input", { type: "text", id: "setup-model", autocomplete: "off" });
  const key = h("input", { type: "password", id: "setup-key", autocomplete: "new-password" });
  const keyRow = h("label", { class: "field" }, h("span", {}, t("setup.api_key")), key);
  const result = h("p", { id: "setup-result", class: "setup-result", "aria-live": "polite" });
  const testBtn = h("button", { type: "button", id: "setup-test" }, t("setup.test"));
  const saveBtn = h("button", { type: "submit", id: "setup-save", class: "primary" }, t("setup.save"));
  const formEl = h("form", { class: "card setup-form", id: "setup-form" },
    h("h2", {}, t("setup.add")),
    h("label", { class: "field" }, h("span", {}, t("setup.provider")), provider),
    h("label", { class: "field" }, h("span", {}, t("setup.name")), name),
    h("label", { class: "field" }, h("span", {}, t("setup.base_url")), baseUrl),
    h("label", { class: "field" }, h("span", {}, t("setup.model")), model),
    keyRow,
    h("div", { class: "row" }, testBtn, saveBtn), result);
  root.append(h("div", { class: "toolbar" }, h("h1", {}, t("nav.setup"))), intro,
    h("h2", {}, t("setup.order")), h("p", { class: "muted small" }, t("setup.order_help")),
    h("div", { class: "table-wrap" }, h("table", { class: "table", id: "setup-table" },
      h("thead", {}, h("tr", {}, h("th", {}, t("setup.name")), h("th", {}, t("setup.provider")),
        h("th", {}, t("setup.model")), h("th", {}, t("plugins.state")), h("th", {}, ""))), table)),
    notes, formEl);

  let presets = [];
  let sources = [];

  function preset() { return presets.find((p) => p.adapter === provider.value) || {}; }

  function fill(p, keepName = false) {
    if (!keepName) name.value = uniqueName(p.adapter || "main");
    baseUrl.value = p.base_url || "";
    model.value = p.model || "";
    key.placeholder = p.key_hint || "";
    keyRow.hidden = p.needs_key === false;
    result.textContent = "";
  }

  function uniqueName(base) {
    const taken = new Set(sources.map((s) => s.name));
    let n = base; let i = 2;
    while (taken.has(n) || n === "env" || n === "offline") n = `${base}-${i++}`;
    return n;
  }

  function body() {
    return { name: name.value.trim(), adapter: provider.value, base_url: baseUrl.value.trim(),
      model: model.value.trim(), api_key: key.value };
  }

  function show(res) {
    result.className = `setup-result ${res.ok ? "ok" : "error"}`;
    result.textContent = res.ok
      ? t("setup.test_ok", { reply: (res.reply || "").trim(), ms: Math.round(res.latency_ms || 0) })
      : t("setup.test_failed", { msg: res.error || "" });
  }

  async function move(index, delta) {
    const names = sources.map((s) => s.name);
    const [item] = names.splice(index, 1);
    names.splice(index + delta, 0, item);
    try { render(await api("PUT", "/api/v1/llm/order", { names })); } catch (err) { toast(err.message, "error"); }
  }

  function render(data) {
    const all = data.sources || [];
    sources = all.filter((s) => !s.fallback);
    intro.hidden = sources.length > 0;
    clear(table);
    sources.forEach((s, i) => {
      const testOne = h("button", { class: "small", onclick: async () => {
        try { const res = await api("POST", "/api/v1/llm/test", { name: s.name }); toast(res.ok ? t("setup.test_ok", { reply: (res.reply || "").trim(), ms: Math.round(res.latency_ms) }) : t("setup.test_failed", { msg: res.error }), res.ok ? "info" : "error"); load(); }
        catch (err) { toast(err.message, "error"); }
      } }, t("setup.test"));
      table.append(h("tr", { dataset: { source: s.name } },
        h("td", {}, s.name, s.name === data.current ? h("span", { class: "badge ok" }, t("overview.current")) : null,
          s.configured ? null : h("span", { class: "badge" }, t("setup.from_env"))),
        h("td", {}, s.adapter), h("td", { class: "wrap" }, s.model),
        h("td", {}, badge(s.state), s.last_error ? h("div", { class: "muted small wrap" }, s.last_error) : null),
        h("td", { class: "actions" },
          h("button", { class: "small", title: t("setup.up"), "aria-label": t("setup.up"), disabled: i === 0, onclick: () => move(i, -1) }, "↑"),
          h("button", { class: "small", title: t("setup.down"), "aria-label": t("setup.down"), disabled: i === sources.length - 1, onclick: () => move(i, 1) }, "↓"),
          testOne,
          s.configured ? h("button", { class: "small", onclick: () => edit(s) }, t("setup.edit")) : null,
          s.configured ? h("button", { class: "small danger", onclick: async () => {
            if (!confirm(t("setup.confirm_remove", { name: s.name }))) return;
            try { render(await api("DELETE", `/api/v1/llm/sources/${encodeURIComponent(s.name)}`)); } catch (err) { toast(err.message, "error"); }
          } }, t("plugins.remove")) : null)));
    });
    if (!sources.length) table.append(h("tr", {}, h("td", { colspan: 5, class: "muted" }, t("setup.none"))));
    clear(notes).append(...(data.notes || []).map((n) => h("div", {}, n)));
  }

  function edit(s) {
    provider.value = s.adapter;
    name.value = s.name;
    baseUrl.value = s.base_url || "";
    model.value = s.model || "";
    key.value = "";
    key.placeholder = t("settings.secret_hint");
    keyRow.hidden = preset().needs_key === false;
    result.textContent = "";
    name.focus();
  }

  async function load() {
    try { render(await api("GET", "/api/v1/llm/sources")); } catch (err) { toast(err.message, "error"); }
  }

  provider.addEventListener("change", () => fill(preset()));
  testBtn.addEventListener("click", async () => {
    testBtn.disabled = true;
    result.className = "setup-result muted";
    result.textContent = t("setup.testing");
    try { show(await api("POST", "/api/v1/llm/test", body())); }
    catch (err) { show({ ok: false, error: err.message }); }
    finally { testBtn.disabled = false; }
  });
  formEl.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    saveBtn.disabled = true;
    try {
      const data = await api("POST", "/api/v1/llm/sources", body());
      toast(t("setup.saved", { name: data.name }));
      key.value = "";
      render(data);
      fill(preset());
    } catch (err) { show({ ok: false, error: err.message }); }
    finally { saveBtn.disabled = false; }
  });

  try {
    const data = await api("GET", "/api/v1/llm/presets");
    presets = data.presets || [];
  } catch (err) { toast(err.message, "error"); }
  for (const p of presets) provider.append(h("option", { value: p.adapter }, p.label));
  await load();
  fill(preset());
}
