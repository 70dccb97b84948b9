// Settings, generated from the daemon's ConfigDefs and grouped by category. Only changed fields
// are sent; the daemon checks all of them before writing any, and each bad field shows its error.
import { ApiError, api } from "../api.js";
import { clear, h, toast } from "../dom.js";
import { currentLang, t } from "../i18n.js";

function control(s, onChange) {
  const common = { id: `setting-${s.key}`, dataset: { key: s.key }, class: "setting-input" };
  let el;
  if (s.type === "bool") {
    el = h("input", { ...common, type: "checkbox", checked: Boolean(s.value) });
    el.addEventListener("change", () => onChange(el.checked));
    return el;
  }
  if (s.type === "select") {
    el = h("select", common, ...s.options.map((o) => h("option", { value: o, selected: o === s.value }, o)));
    el.addEventListener("change", () => onChange(el.value));
    return el;
  }
  if (s.secret) {
    el = h("input", { ...common, type: "password", autocomplete: "off", placeholder: s.value ? `${s.value} — ${t("settings.secret_hint")}` : "" });
    el.addEventListener("input", () => onChange(el.value));
    return el;
  }
  if (s.type === "text" || s.type === "json") {
    const shown = s.type === "json" && typeof s.value !== "string" ? JSON.stringify(s.value, null, 2) : (s.value ?? "");
    el = h("textarea", { ...common, rows: Math.min(8, Math.max(2, String(shown).split("\n").length)) });
    el.value = shown;
    el.addEventListener("input", () => onChange(el.value));
    return el;
  }
  const numeric = s.type === "int" || s.type === "float";
  el = h("input", {
    ...common, type: numeric ? "number" : "text", value: s.value ?? "", placeholder: s.placeholder || "",
    min: s.min ?? undefined, max: s.max ?? undefined, step: numeric ? (s.step ?? (s.type === "int" ? 1 : "any")) : undefined,
  });
  el.addEventListener("input", () => onChange(el.value));
  return el;
}

export async function mount(root) {
  const status = h("div", { class: "save-status", id: "settings-status", role: "status" });
  const filter = h("input", { type: "search", id: "settings-filter", "data-i18n-placeholder": "settings.filter" });
  const saveBtn = h("button", { class: "primary", id: "settings-save" }, t("settings.save"));
  const body = h("div", { class: "settings" });
  const empty = h("p", { class: "muted", id: "settings-empty", hidden: true }, t("settings.no_match"));
  root.append(h("div", { class: "toolbar sticky" }, h("h1", {}, t("nav.settings")), filter, saveBtn, status), empty, body);

  let changes = {};
  const errorSlots = {};

  async function load() {
    changes = {};
    clear(body);
    const data = await api("GET", `/api/v1/settings?lang=${currentLang()}`);
    for (const cat of data.categories) {
      const section = h("details", { class: "card settings-group", open: true, dataset: { category: cat.name } },
        h("summary", {}, h("h2", {}, t(`cat.${cat.name}`) === `cat.${cat.name}` ? cat.name : t(`cat.${cat.name}`))));
      for (const s of cat.settings) {
        const err = h("div", { class: "field-error", role: "alert" });
        errorSlots[s.key] = err;
        const row = h("div", { class: "setting", dataset: { key: s.key } },
          h("label", { for: `setting-${s.key}` }, h("span", { class: "setting-name" }, s.display_name),
            h("code", { class: "setting-key" }, s.key)),
          control(s, (value) => { changes[s.key] = value; row.classList.add("dirty"); err.textContent = ""; }),
          h("div", { class: "setting-help muted" }, s.description,
            s.default !== null && s.default !== "" && !s.secret ? ` (${t("settings.default")}: ${typeof s.default === "string" ? s.default : JSON.stringify(s.default)})` : ""),
          err);
        section.append(row);
      }
      body.append(section);
    }
    applyFilter();
  }

  saveBtn.addEventListener("click", async () => {
    const keys = Object.keys(changes);
    if (!keys.length) { status.textContent = t("settings.nochange"); return; }
    for (const slot of Object.values(errorSlots)) slot.textContent = "";
    try {
      const res = await api("PUT", "/api/v1/settings", changes);
      status.textContent = t("settings.saved", { n: Object.keys(res.saved || {}).length });
      status.className = "save-status ok";
      await load();
    } catch (err) {
      status.className = "save-status error";
      if (err instanceof ApiError && err.body.errors) {
        status.textContent = t("settings.invalid");
        for (const [key, msg] of Object.entries(err.body.errors)) if (errorSlots[key]) errorSlots[key].textContent = msg;
      } else {
        status.textContent = t("common.error", { msg: err.message });
        toast(err.message, "error");
      }
    }
  });

  // also after a (re)load: text typed while the settings were loading still filters them
  function applyFilter() {
    const q = filter.value.trim().toLowerCase();
    for (const row of body.querySelectorAll(".setting")) row.hidden = Boolean(q) && !row.textContent.toLowerCase().includes(q);
    for (const group of body.querySelectorAll(".settings-group")) {
      group.hidden = Boolean(q) && !group.querySelector(".setting:not([hidden])");
      if (q && !group.hidden) group.open = true;
    }
    empty.hidden = !q || Boolean(body.querySelector(".settings-group:not([hidden])"));
  }
  filter.addEventListener("input", applyFilter);

  await load();
}
