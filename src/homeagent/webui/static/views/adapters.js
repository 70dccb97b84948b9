// Adapters: the Lua scripts that speak each provider's wire format. Built-in ones can be read and
// saved as your own copy (which then overrides the built-in); a save is checked before it is written.
import { api } from "../api.js";
import { clear, h, toast } from "../dom.js";
import { t } from "../i18n.js";

export async function mount(root) {
  const list = h("ul", { class: "entry-list", id: "adapter-list" });
  const name = h("input", { type: "text", id: "adapter-name", placeholder: "my_provider" });
  const code = h("textarea", { id: "adapter-code", rows: 26, spellcheck: "false", class: "code" });
  const save = h("button", { class: "primary", id: "adapter-save" }, t("adapters.save"));
  const del = h("button", { class: "danger", id: "adapter-delete" }, t("adapters.delete"));
  const fresh = h("button", { class: "ghost" }, t("adapters.new"));
  const message = h("pre", { class: "adapter-message", id: "adapter-message" });
  root.append(h("div", { class: "toolbar" }, h("h1", {}, t("nav.adapters"))),
    h("div", { class: "split" }, h("aside", { class: "card" }, fresh, list),
      h("section", { class: "editor" }, name, code, h("div", { class: "row" }, save, del), message)));

  let builtin = false;

  async function open(entry) {
    try {
      const data = await api("GET", `/api/v1/adapters/${encodeURIComponent(entry)}`);
      name.value = data.name;
      code.value = data.code;
      builtin = data.builtin;
      save.textContent = builtin ? t("adapters.save_as") : t("adapters.save");
      del.disabled = builtin;
      message.textContent = data.path;
      message.className = "adapter-message muted";
    } catch (err) { toast(err.message, "error"); }
  }

  async function load() {
    clear(list);
    try {
      const data = await api("GET", "/api/v1/adapters");
      for (const a of data.adapters) {
        list.append(h("li", { dataset: { adapter: a.name } },
          h("a", { href: "#/adapters", onclick: (ev) => { ev.preventDefault(); open(a.name); } }, a.name),
          " ", h("span", { class: `badge ${a.error ? "error" : a.builtin ? "" : "ok"}` }, a.error ? "error" : a.builtin ? t("adapters.builtin") : t("adapters.user")),
          a.version ? h("span", { class: "muted small" }, ` v${a.version}`) : null));
      }
    } catch (err) {
      list.append(h("li", { class: err.status === 501 ? "notice" : "error" },
        err.status === 501 ? t("common.unavailable", { msg: err.body.missing || err.message }) : t("common.error", { msg: err.message })));
    }
  }

  save.addEventListener("click", async () => {
    try {
      await api("PUT", `/api/v1/adapters/${encodeURIComponent(name.value.trim())}`, { code: code.value });
      message.textContent = t("adapters.ok");
      message.className = "adapter-message ok";
      builtin = false; del.disabled = false; save.textContent = t("adapters.save");
      load();
    } catch (err) {
      message.textContent = err.body && err.body.location ? `${err.message}\n${err.body.location}` : err.message;
      message.className = "adapter-message error";
    }
  });
  del.addEventListener("click", async () => {
    const entry = name.value.trim();
    if (!entry || builtin || !confirm(t("adapters.confirm_delete", { name: entry }))) return;
    try { await api("DELETE", `/api/v1/adapters/${encodeURIComponent(entry)}`); code.value = ""; name.value = ""; load(); }
    catch (err) { message.textContent = err.message; message.className = "adapter-message error"; }
  });
  fresh.addEventListener("click", () => { name.value = ""; code.value = ""; builtin = false; del.disabled = false; name.focus(); });
  await load();
}
