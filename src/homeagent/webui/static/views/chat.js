// Chat: conversations (list, search, new, rename, export, delete), streamed replies with reasoning and
// tool calls as they happen, stop and interrupt, file attachments, regenerate and edit, and messages the
// agent sends by itself. What a conversation showed comes back from the daemon page by page (newest
// first), drawn exactly as it was shown live.
import { ApiError, api, postStream } from "../api.js";
import { followApprovals } from "../approvals.js";
import { fromUpload } from "../attachments.js";
import { AssistantMessage, renderEntry, userMessage } from "../chat/messages.js";
import { ConversationList, conversationTitle } from "../chat/sidebar.js";
import { clear, h, toast } from "../dom.js";
import { t } from "../i18n.js";

const PAGE = 50;
const LAST = "ha-conversation";

function newId() {
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();
  return `m-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

function requestedConversation() {
  const part = location.hash.replace(/^#\/?/, "").split("/")[1] || "";
  return /^\d+$/.test(part) ? Number(part) : null;
}

export async function mount(root) {
  const list = h("div", { class: "messages", id: "messages", "aria-live": "polite" });
  const older = h("button", { type: "button", id: "chat-older", class: "ghost small older", hidden: true }, t("chat.older"));
  const input = h("textarea", { id: "chat-input", rows: 2, "data-i18n-placeholder": "chat.placeholder" });
  const sendBtn = h("button", { type: "submit", id: "chat-send", class: "primary" }, t("chat.send"));
  const stopBtn = h("button", { type: "button", id: "chat-stop", class: "danger", hidden: true }, t("chat.stop"));
  const fileInput = h("input", { type: "file", id: "chat-file", multiple: true, hidden: true });
  const attachBtn = h("button", { type: "button", id: "chat-attach", class: "ghost" }, "+ " + t("chat.attach"));
  const attached = h("div", { class: "attached muted", id: "chat-attached" });
  const hint = h("div", { class: "muted hint", id: "chat-hint", hidden: true }, t("chat.busy_hint"));
  const form = h("form", { class: "composer", id: "chat-form" },
    h("div", { class: "composer-row" }, input,
      h("div", { class: "composer-buttons" }, sendBtn, stopBtn, attachBtn)), attached, hint, fileInput);
  const title = h("h2", { id: "conv-title", class: "conv-name" }, t("chat.untitled"));
  const toggle = h("button", { type: "button", id: "conv-toggle", class: "ghost conv-toggle", "aria-label": t("chat.conversations") }, "☰");
  const renameBtn = h("button", { type: "button", id: "conv-rename", class: "ghost small", title: t("chat.rename") }, "✎");
  const exportMd = h("a", { id: "conv-export-md", class: "button ghost small", download: "", title: t("chat.export_md") }, "MD");
  const exportJson = h("a", { id: "conv-export-json", class: "button ghost small", download: "", title: t("chat.export_json") }, "JSON");
  const deleteBtn = h("button", { type: "button", id: "conv-delete", class: "ghost small danger-text", title: t("chat.delete") }, t("chat.delete_short"));
  const tools = h("div", { class: "conv-actions", id: "conv-actions", hidden: true }, renameBtn, exportMd, exportJson, deleteBtn);
  const head = h("header", { class: "chat-head" }, toggle, title, tools);

  let conv = null;        // the conversation shown ({id, title, …}); null: a new one, made on the first send
  let before = null;      // cursor: the oldest entry shown (older pages come before it)
  let loadingOlder = false;
  let shown = 0;          // which open()/startNew() is the latest: an earlier one that ends later draws nothing
  let stream = null;      // the turn this page streams: {conv, controller}
  let mounted = true;     // false once the user went to another page: late answers then change nothing here
  let files = [];
  let picked;
  const chosen = new Promise((resolve) => { picked = resolve; });  // the conversation is known (not its entries)
  const controller = new AbortController();

  const sidebar = new ConversationList({
    onPick: (id) => open(id),
    onNew: () => startNew(),
  });
  root.append(h("div", { class: "chat-layout" }, sidebar.el,
    h("section", { class: "chat" }, head, list, form)));
  toggle.addEventListener("click", () => sidebar.toggle());

  function busy() { return stream !== null && conv !== null && stream.conv === conv.id; }

  function showBusy() {
    const value = busy();
    stopBtn.hidden = !value;
    hint.hidden = !value;
    sendBtn.textContent = value ? t("chat.interrupt") : t("chat.send");
    sendBtn.classList.toggle("warn", value);
    root.dataset.busy = value ? "1" : "";
    decorate();
  }

  function scroll() { list.scrollTop = list.scrollHeight; }

  function header() {
    title.textContent = conv ? conversationTitle(conv) : t("chat.untitled");
    tools.hidden = !conv;
    if (conv) {
      exportMd.href = `/api/v1/conversations/${conv.id}/export?format=md`;
      exportJson.href = `/api/v1/conversations/${conv.id}/export?format=json`;
    }
  }

  function remember(id) {
    if (!mounted) return;  // a page read that ends after the user went elsewhere must not move the address back
    if (id) localStorage.setItem(LAST, String(id)); else localStorage.removeItem(LAST);
    if (location.hash === "" || location.hash.startsWith("#/chat")) history.replaceState(null, "", id ? `#/chat/${id}` : "#/chat");
  }

  // Edit on your messages, regenerate on the last reply: only while nothing of this conversation runs.
  function decorate() {
    const idle = !busy();
    const msgs = [...list.querySelectorAll(".msg[data-entry]")];
    const mine = msgs.filter((el) => el.classList.contains("user") && !el.classList.contains("interrupt"));
    const replies = msgs.filter((el) => el.classList.contains("assistant") && !el.classList.contains("proactive"));
    for (const el of msgs) clear(el.querySelector(".msg-actions") || h("div"));
    if (!idle) return;
    for (const el of mine) {
      el.querySelector(".msg-actions").append(h("button", { type: "button", class: "ghost small edit",
        title: t("chat.edit"), onclick: () => edit(el) }, `✎ ${t("chat.edit")}`));
    }
    const reply = replies[replies.length - 1];
    const asked = mine[mine.length - 1];
    if (reply && asked && !reply.classList.contains("pending")
        && (asked.compareDocumentPosition(reply) & Node.DOCUMENT_POSITION_FOLLOWING)) {
      reply.querySelector(".msg-actions").append(h("button", { type: "button", class: "ghost small regenerate",
        title: t("chat.regenerate"), onclick: () => regenerate() }, `↻ ${t("chat.regenerate")}`));
    }
  }

  // ------------------------------------------------------------ pages of a conversation
  // A page of entries drawn apart (the page stays usable meanwhile); an entry shown already is left out.
  async function build(entries) {
    const frag = document.createDocumentFragment();
    for (const entry of entries) {
      // a turn this page started while the page was being read is shown already
      if (list.querySelector(`.msg[data-entry="${entry.id}"]`)
          || (entry.input_id && list.querySelector(`.msg.${entry.kind === "assistant" ? "assistant" : "user"}[data-input-id="${CSS.escape(entry.input_id)}"]`))) continue;
      await renderEntry(frag, entry);
    }
    return frag;
  }

  // Show conversation ``id``: its newest page. ``keep``: what was sent while it loaded stays, after it.
  async function open(id, { keep = false } = {}) {
    const mine = ++shown;
    conv = sidebar.items.find((c) => c.id === id) || conv;
    let page;
    try {
      page = await api("GET", `/api/v1/conversations/${id}/entries?limit=${PAGE}`);
    } catch (err) {
      if (mine !== shown) return;
      if (err instanceof ApiError && err.status === 404) { remember(null); await pickDefault(); return; }
      throw err;
    }
    if (mine !== shown) return;  // another chat was picked (or a new one started) meanwhile
    conv = page.conversation;
    remember(conv.id);
    sidebar.setCurrent(conv.id);
    header();
    if (!keep) clear(list);
    list.prepend(older);
    before = page.before;
    older.hidden = !page.more;
    if (!page.entries.length && !list.querySelector(".msg")) list.append(h("p", { class: "muted empty" }, t("chat.empty")));
    const frag = await build(page.entries);
    if (mine !== shown) return;  // another chat was picked while these were drawn
    list.insertBefore(frag, older.nextSibling);
    showBusy();
    scroll();
  }

  async function loadOlder() {
    if (!conv || before === null || loadingOlder) return;
    loadingOlder = true;
    older.textContent = t("common.loading");
    const id = conv.id;
    try {
      const page = await api("GET", `/api/v1/conversations/${id}/entries?limit=${PAGE}&before=${before}`);
      const mine = shown;
      const frag = await build(page.entries);
      if (mine !== shown || !conv || conv.id !== id) return;
      const height = list.scrollHeight;
      list.insertBefore(frag, older.nextSibling);
      list.scrollTop += list.scrollHeight - height;  // the message read stays where it was
      before = page.before;
      older.hidden = !page.more;
      decorate();
    } catch (err) {
      toast(String(err.message || err), "error");
    } finally {
      loadingOlder = false;
      older.textContent = t("chat.older");
    }
  }
  older.addEventListener("click", loadOlder);
  list.addEventListener("scroll", () => { if (list.scrollTop < 80 && !older.hidden) loadOlder(); });

  // the list again, and the shown conversation's title from it (the first message titles a new chat)
  async function syncList() {
    await sidebar.refresh();
    const found = conv && sidebar.items.find((c) => c.id === conv.id);
    if (found) { conv = found; header(); }
    sidebar.setCurrent(conv && conv.id);
  }

  function startNew() {
    shown += 1;
    conv = null;
    before = null;
    remember(null);
    sidebar.setCurrent(null);
    header();
    clear(list).append(older, h("p", { class: "muted empty" }, t("chat.empty")));
    older.hidden = true;
    showBusy();
    input.focus();
  }

  async function pickDefault({ keep = false } = {}) {
    const mine = shown;
    const items = await sidebar.refresh();
    if (mine !== shown) { picked(); return; }  // the user picked one (or a new chat) meanwhile
    const wanted = requestedConversation() ?? Number(localStorage.getItem(LAST) || 0);
    const found = items.find((c) => c.id === wanted) ? wanted : (items[0] && items[0].id);
    if (!found) { startNew(); picked(); return; }
    conv = items.find((c) => c.id === found);
    header();
    picked();
    await open(found, { keep });
  }

  async function ensureConversation() {
    if (conv) return conv;
    conv = await api("POST", "/api/v1/conversations", {});
    remember(conv.id);
    header();
    syncList();
    return conv;
  }

  // ------------------------------------------------------------ turns
  async function runTurn(path, body, userEl) {
    for (const el of list.querySelectorAll(".empty")) el.remove();
    const reply = new AssistantMessage(list);
    const mine = { conv: conv.id, controller: new AbortController() };
    stream = mine;
    showBusy();
    scroll();
    const abort = () => mine.controller.abort();
    controller.signal.addEventListener("abort", abort);
    try {
      await postStream(path, body, async (frame) => {
        if (frame.type === "accepted" && userEl) {
          userEl.dataset.inputId = frame.id;
          if (frame.entry) userEl.dataset.entry = frame.entry;
        }
        await reply.frame(frame);
        if (reply.el.isConnected) scroll();
      }, mine.controller.signal);
    } catch (err) {
      if (err.name !== "AbortError") reply.error(err instanceof ApiError ? err.message : String(err));
    } finally {
      controller.signal.removeEventListener("abort", abort);
      reply.el.classList.remove("streaming");
      if (stream === mine) stream = null;
      showBusy();
      if (reply.el.isConnected) scroll();
      else if (conv && conv.id === mine.conv) open(conv.id);  // shown again since: draw it from the record
      syncList();
    }
  }

  fileInput.addEventListener("change", () => {
    files = [...fileInput.files];
    attached.textContent = files.length ? t("chat.attached", { names: files.map((f) => f.name).join(", ") }) : "";
  });
  attachBtn.addEventListener("click", () => fileInput.click());

  stopBtn.addEventListener("click", async () => {
    try { await api("POST", "/api/v1/chat/cancel"); } catch (err) { toast(String(err.message || err), "error"); }
  });

  async function uploadNotes() {
    if (!files.length) return { note: "", media: [], thumbs: [] };
    const data = new FormData();
    for (const f of files) data.append("file", f, f.name);
    data.append("inject", "false");
    attached.textContent = t("chat.uploading");
    const res = await api("POST", "/api/v1/chat/file", data);
    files = [];
    fileInput.value = "";
    attached.textContent = "";
    // files kept in the media store go with the message as media: images reach the model as images
    const media = (res.files || []).filter((f) => f.media).map((f) => f.media.digest);
    const thumbs = (res.files || []).filter((f) => f.media).map(fromUpload);  // shown in the bubble
    return { note: res.note || "", media, thumbs };
  }

  async function submit() {
    let text = input.value.trim();
    await chosen;
    if (busy()) {
      if (!text) return;
      input.value = "";
      const el = userMessage(list, text, { interrupt: true, ts: Date.now() / 1000 });
      scroll();
      try {
        const res = await api("POST", "/api/v1/chat/interrupt", { text, conversation: conv.id });
        el.dataset.inputId = res.id;
      } catch (err) { toast(String(err.message || err), "error"); }
      return;
    }
    if (!text && !files.length) return;
    let notes = "";
    let media = [];
    let thumbs = [];
    try { ({ note: notes, media, thumbs } = await uploadNotes()); } catch (err) { toast(String(err.message || err), "error"); return; }
    input.value = "";
    if (notes) text = text ? `${text}\n\n${notes}` : notes;
    try { await ensureConversation(); } catch (err) { toast(String(err.message || err), "error"); return; }
    const userEl = userMessage(list, text, { ts: Date.now() / 1000, media: thumbs });
    const body = { text, client_msg_id: newId(), conversation: conv.id };
    if (media.length) body.media = media;
    await runTurn("/api/v1/chat/stream", body, userEl);
  }

  function dropFrom(el) {
    // the transcript continues from this message: everything from it on leaves the page too
    let node = el;
    while (node) { const next = node.nextSibling; if (node.classList && node.classList.contains("msg")) node.remove(); node = next; }
  }

  async function regenerate() {
    if (!conv || busy()) return;
    const users = [...list.querySelectorAll(".msg.user:not(.interrupt)[data-entry]")];
    const last = users[users.length - 1];
    if (!last) return;
    const text = last.dataset.text || "";
    dropFrom(last);
    const userEl = userMessage(list, text, { ts: Date.now() / 1000 });
    await runTurn(`/api/v1/conversations/${conv.id}/regenerate`, { client_msg_id: newId() }, userEl);
  }

  function edit(el) {
    if (busy() || el.querySelector(".edit-box")) return;
    const area = h("textarea", { class: "edit-text", rows: 3 });
    area.value = el.dataset.text || "";
    const save = h("button", { type: "button", class: "primary small edit-save" }, t("chat.edit_save"));
    const cancel = h("button", { type: "button", class: "ghost small edit-cancel" }, t("chat.edit_cancel"));
    const box = h("div", { class: "edit-box" }, area, h("div", { class: "row end" }, cancel, save));
    el.append(box);
    area.focus();
    cancel.addEventListener("click", () => box.remove());
    save.addEventListener("click", async () => {
      const text = area.value.trim();
      if (!text) return;
      const entry = Number(el.dataset.entry);
      dropFrom(el);
      const userEl = userMessage(list, text, { ts: Date.now() / 1000 });
      await runTurn(`/api/v1/conversations/${conv.id}/edit`, { entry, text, client_msg_id: newId() }, userEl);
    });
  }

  // ------------------------------------------------------------ the header's actions
  renameBtn.addEventListener("click", () => {
    if (!conv || head.querySelector(".rename-box")) return;
    const field = h("input", { type: "text", id: "conv-rename-input", maxlength: 200, value: conv.title || "" });
    const box = h("div", { class: "rename-box" }, field);
    title.hidden = true;
    title.after(box);
    field.focus();
    field.select();
    const done = () => { box.remove(); title.hidden = false; };
    field.addEventListener("keydown", async (ev) => {
      if (ev.key === "Escape") { done(); return; }
      if (ev.key !== "Enter" || ev.isComposing) return;
      ev.preventDefault();
      try {
        conv = await api("PATCH", `/api/v1/conversations/${conv.id}`, { title: field.value });
        done();
        header();
        await sidebar.refresh();
        sidebar.setCurrent(conv.id);
      } catch (err) { toast(String(err.message || err), "error"); }
    });
    field.addEventListener("blur", () => setTimeout(done, 150));
  });

  deleteBtn.addEventListener("click", async () => {
    if (!conv || !confirm(t("chat.confirm_delete", { title: conversationTitle(conv) }))) return;
    try {
      await api("DELETE", `/api/v1/conversations/${conv.id}`);
      toast(t("chat.deleted"));
      conv = null;
      remember(null);
      await pickDefault();
    } catch (err) { toast(String(err.message || err), "error"); }
  });

  form.addEventListener("submit", (ev) => { ev.preventDefault(); submit(); });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); submit(); }
  });

  // which conversation to show: the one in the address, the one used last here, the most recent, or a new one
  pickDefault({ keep: true }).catch((err) => {
    picked();
    list.append(h("p", { class: "error" }, t("common.error", { msg: err.message || err })));
  });

  // messages the agent sends by itself (reminders, plugins, output_send__webui) land in their conversation
  const events = new EventSource("/api/v1/events?types=agent_output&since=now");
  events.addEventListener("agent_output", async (ev) => {
    const data = JSON.parse(ev.data).data || {};
    if (data.kind === "reply") {  // a reply this page did not stream (another tab's) finished: draw it as stored
      const pending = list.querySelector(`.msg.assistant.pending[data-input-id="${CSS.escape(data.input_id || "")}"]`);
      if (pending && conv && !busy()) open(conv.id);
      return;
    }
    if (data.kind !== "channel_output" || data.channel !== "webui") return;
    if (conv && data.conversation !== undefined && data.conversation !== conv.id) {
      syncList().then(() => sidebar.markUnread(data.conversation));
      return;
    }
    for (const el of list.querySelectorAll(".empty")) el.remove();
    await renderEntry(list, { kind: "proactive", id: data.entry, text: data.text || "", file: data.file,
      ts: Date.now() / 1000 });
    if (!conv && data.conversation) { await chosen; if (!conv) await open(data.conversation); }
    scroll();
  });

  // tool calls waiting for you (this page's turns, other channels', sub-agents'): Allow once / Always / Deny
  const stopApprovals = await followApprovals(list, () => scroll());

  input.focus();
  return () => { mounted = false; events.close(); stopApprovals(); controller.abort(); };
}
