// Skills: SKILL.md folders the model reads when a task calls for them. Each is a plugin of kind
// "skill": switched on and off one by one, installed from an uploaded .zip/.hmap or from a folder
// on this machine (a folder with only a SKILL.md, any letter case, is enough).
import { api } from "../api.js";
import { clear, h, toast } from "../dom.js";
import { t } from "../i18n.js";

export async function mount(root) {
  const body = h("tbody", { id: "skills-list" });
  const file = h("input", { type: "file", accept: ".zip,.hmap", id: "skill-file" });
  const path = h("input", { type: "text", id: "skill-path", placeholder: "/home/me/skills/pdf-tools" });
  const result = h("p", { id: "skill-result", class: "small", "aria-live": "polite" });
  root.append(h("div", { class: "toolbar" }, h("h1", {}, t("nav.skills")),
    h("button", { class: "ghost", onclick: () => load() }, t("common.refresh"))),
  h("p", { class: "muted small" }, t("skills.help")),
  h("div", { class: "table-wrap" }, h("table", { class: "table", id: "skills-table" },
    h("thead", {}, h("tr", {}, h("th", {}, t("plugins.name")), h("th", {}, t("skills.description")),
      h("th", {}, t("plugins.state")), h("th", {}, ""))), body)),
  h("div", { class: "card setup-form" }, h("h2", {}, t("skills.install")),
    h("label", { class: "field" }, h("span", {}, t("skills.upload")), file),
    h("div", { class: "row" }, h("button", { class: "primary", id: "skill-upload", onclick: () => upload() }, t("skills.upload_button"))),
    h("label", { class: "field" }, h("span", {}, t("skills.from_path")), path),
    h("div", { class: "row" }, h("button", { id: "skill-install-path", onclick: () => fromPath() }, t("skills.path_button"))),
    result));

  function done(data) {
    const item = data.installed || {};
    result.className = `small ${item.state === "failed" ? "error" : "ok"}`;
    result.textContent = t("skills.installed", { name: item.name || "?", state: t(`skills.state.${item.state || "running"}`) })
      + (item.error ? ` ${item.error}` : "");
    load();
  }

  function failed(err) { result.className = "small error"; result.textContent = err.message; }

  async function upload() {
    if (!file.files.length) { file.click(); return; }
    const form = new FormData();
    form.append("file", file.files[0], file.files[0].name);
    try { done(await api("POST", "/api/v1/plugins", form)); file.value = ""; } catch (err) { failed(err); }
  }

  async function fromPath() {
    if (!path.value.trim()) { path.focus(); return; }
    try { done(await api("POST", "/api/v1/plugins", { path: path.value.trim() })); path.value = ""; } catch (err) { failed(err); }
  }

  async function act(name, action) {
    try {
      if (action === "remove") {
        if (!confirm(t("plugins.confirm_remove", { name }))) return;
        await api("DELETE", `/api/v1/plugins/${encodeURIComponent(name)}`);
      } else await api("POST", `/api/v1/plugins/${encodeURIComponent(name)}/${action}`);
    } catch (err) { toast(err.message, "error"); }
    load();
  }

  async function load() {
    let data;
    try { data = await api("GET", "/api/v1/plugins"); } catch (err) {
      clear(body).append(h("tr", {}, h("td", { colspan: 4, class: "error" }, t("common.error", { msg: err.message }))));
      return;
    }
    const skills = (data.plugins || []).filter((p) => p.kind === "skill");
    clear(body);
    for (const p of skills) {
      const off = p.state === "disabled";
      const skill = p.skill || {};
      const missing = (skill.missing || []).join(", ");
      body.append(h("tr", { dataset: { skill: p.name } },
        h("td", {}, h("b", {}, p.name)),
        h("td", { class: "wrap" }, p.description || skill.description || "",
          missing ? h("div", { class: "muted small" }, t("skills.missing", { what: missing })) : null,
          p.error ? h("div", { class: "error small" }, p.error) : null),
        h("td", {}, h("span", { class: `badge ${p.state === "running" ? "ok" : p.state === "failed" ? "error" : ""}` }, t(`skills.state.${p.state}`))),
        h("td", { class: "actions" },
          off ? h("button", { class: "small", onclick: () => act(p.name, "enable") }, t("plugins.enable"))
            : h("button", { class: "small", onclick: () => act(p.name, "disable") }, t("plugins.disable")),
          h("button", { class: "small danger", onclick: () => act(p.name, "remove") }, t("plugins.remove")))));
    }
    if (!skills.length) body.append(h("tr", {}, h("td", { colspan: 4, class: "muted" }, t("skills.none"))));
  }

  await load();
}
