// Knowledge editor: list and search entries, edit Markdown with a safe preview, save, delete.
import { api } from "../api.js";
import { clear, h, toast } from "../dom.js";
import { t } from "../i18n.js";
import { renderMarkdown } from "../markdown.js";

export async function mount(root) {
  const list = h("ul", { class: "entry-list", id: "knowledge-list" });
  const search = h("input", { type: "search", id: "knowledge-search", "data-i18n-placeholder": "knowledge.search" });
  const name = h("input", { type: "text", id: "knowledge-name", "data-i18n-placeholder": "knowledge.name" });
  const content = h("textarea", { id: "knowledge-content", rows: 18, "data-i18n-placeholder": "knowledge.content" });
  const preview = h("div", { class: "markdown preview card", id: "knowledge-preview" });
  const save = h("button", { class: "primary", id: "knowledge-save" }, t("knowledge.save"));
  const del = h("button", { class: "danger", id: "knowledge-delete" }, t("knowledge.delete"));
  const fresh = h("button", { class: "ghost" }, t("knowledge.new"));
  const message = h("div", { class: "muted", id: "knowledge-message" });
  root.append(h("div", { class: "toolbar" }, h("h1", {}, t("nav.knowledge")), search),
    h("div", { class: "split" },
      h("aside", { class: "card" }, fresh, list),
      h("section", { class: "editor" }, name, content, h("div", { class: "row" }, save, del, message),
        h("h3", {}, t("knowledge.preview")), preview)));

  let timer = null;
  content.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => renderMarkdown(preview, content.value), 200); });

  async function open(entry) {
    try {
      const data = await api("GET", `/api/v1/knowledge/${encodeURIComponent(entry)}`);
      name.value = data.name || entry;
      content.value = data.content || "";
      renderMarkdown(preview, content.value);
    } catch (err) { toast(err.message, "error"); }
  }

  async function load() {
    clear(list);
    try {
      const q = search.value.trim();
      const items = q ? (await api("GET", `/api/v1/knowledge/search?q=${encodeURIComponent(q)}`)).results
        : (await api("GET", "/api/v1/knowledge")).entries;
      for (const item of items) {
        const entry = typeof item === "string" ? item : (item.name || item.title || "");
        list.append(h("li", {}, h("a", { href: "#/knowledge", onclick: (ev) => { ev.preventDefault(); open(entry); } }, entry)));
      }
      if (!items.length) list.append(h("li", { class: "muted" }, t("memory.empty")));
    } catch (err) {
      clear(list).append(h("li", { class: err.status === 501 ? "notice" : "error" },
        err.status === 501 ? t("common.unavailable", { msg: err.body.missing || err.message }) : t("common.error", { msg: err.message })));
    }
  }

  save.addEventListener("click", async () => {
    try {
      await api("POST", "/api/v1/knowledge", { name: name.value.trim(), content: content.value });
      message.textContent = t("common.saved");
      load();
    } catch (err) { message.textContent = t("common.error", { msg: err.message }); }
  });
  del.addEventListener("click", async () => {
    const entry = name.value.trim();
    if (!entry || !confirm(t("knowledge.confirm_delete", { name: entry }))) return;
    try { await api("DELETE", `/api/v1/knowledge/${encodeURIComponent(entry)}`); name.value = ""; content.value = ""; clear(preview); load(); }
    catch (err) { message.textContent = t("common.error", { msg: err.message }); }
  });
  fresh.addEventListener("click", () => { name.value = ""; content.value = ""; clear(preview); name.focus(); });
  search.addEventListener("keydown", (ev) => { if (ev.key === "Enter") load(); });
  await load();
}
