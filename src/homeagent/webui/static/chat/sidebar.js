// The conversation list: new, search (titles and message text), pick one. A column beside the chat on
// wide screens; on a phone a drawer opened from the chat's header.
import { api } from "../api.js";
import { clear, fmtDay, h, toast } from "../dom.js";
import { t } from "../i18n.js";

export function conversationTitle(conv) {
  return (conv && conv.title) || t("chat.untitled");
}

export class ConversationList {
  constructor({ onPick, onNew }) {
    this.onPick = onPick;
    this.current = null;
    this.items = [];
    this.query = "";
    this.search = h("input", { type: "search", id: "conv-search", placeholder: t("chat.search"), "aria-label": t("chat.search") });
    this.list = h("ul", { class: "conv-items", id: "conv-list" });
    this.newBtn = h("button", { type: "button", id: "conv-new", class: "primary", onclick: () => onNew() }, `+ ${t("chat.new")}`);
    this.closeBtn = h("button", { type: "button", class: "ghost conv-close", "aria-label": t("chat.close_list"),
      onclick: () => this.close() }, "×");
    this.el = h("aside", { class: "conv-panel", id: "conv-panel", "aria-label": t("chat.conversations") },
      h("div", { class: "conv-head" }, this.newBtn, this.closeBtn), this.search, this.list);
    let timer = null;
    this.search.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => { this.query = this.search.value.trim(); this.refresh(); }, 200);
    });
  }

  open() { this.el.classList.add("open"); }
  close() { this.el.classList.remove("open"); }
  toggle() { this.el.classList.toggle("open"); }

  async refresh() {
    try {
      const path = this.query ? `/api/v1/conversations?q=${encodeURIComponent(this.query)}` : "/api/v1/conversations";
      const data = await api("GET", path);
      this.items = data.conversations || [];
      this.draw();
    } catch (err) {
      toast(String(err.message || err), "error");
    }
    return this.items;
  }

  setCurrent(id) {
    this.current = id;
    for (const li of this.list.querySelectorAll("li[data-conv]")) {
      const here = Number(li.dataset.conv) === id;
      li.classList.toggle("active", here);
      if (here) { li.setAttribute("aria-current", "true"); li.classList.remove("unread"); } else li.removeAttribute("aria-current");
    }
  }

  markUnread(id) {
    const li = this.list.querySelector(`li[data-conv="${id}"]`);
    if (li && id !== this.current) li.classList.add("unread");
  }

  draw() {
    clear(this.list);
    if (!this.items.length) {
      this.list.append(h("li", { class: "muted empty" }, this.query ? t("chat.no_match") : t("chat.no_conversations")));
      return;
    }
    for (const conv of this.items) {
      const li = h("li", { dataset: { conv: conv.id }, class: conv.id === this.current ? "active" : "" },
        h("a", { href: `#/chat/${conv.id}`, onclick: (ev) => { ev.preventDefault(); this.close(); this.onPick(conv.id); } },
          h("span", { class: "conv-title" }, conversationTitle(conv)),
          h("span", { class: "conv-when muted" }, fmtDay(conv.updated)),
          conv.origin === "openai" ? h("span", { class: "badge" }, t("chat.origin_openai")) : null,
          conv.match ? h("span", { class: "conv-match muted" }, conv.match.text) : null));
      this.list.append(li);
    }
  }
}
