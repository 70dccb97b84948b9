// Chat: streamed replies with reasoning and tool calls as they happen, stop and interrupt,
// file attachments, history from the text log, and proactive messages sent to this page.
import { ApiError, api, postStream } from "../api.js";
import { followApprovals } from "../approvals.js";
import { attachments, fromMarkers, fromUpload } from "../attachments.js";
import { clear, fmtTime, h, pretty, toast } from "../dom.js";
import { t } from "../i18n.js";
import { renderMarkdown } from "../markdown.js";

function newId() {
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();
  return `m-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

function readable(result) {
  if (typeof result !== "string") return pretty(result);
  const text = result.trim();
  if (text.startsWith("{") || text.startsWith("[")) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch { /* shown as it is */ }
  }
  return result;
}

function toolCard(frame) {
  const status = frame.status || "ok";
  return h("details", { class: `tool-call status-${status}`, dataset: { tool: frame.tool || "" } },
    h("summary", {}, h("span", { class: "tool-icon" }, "⚙"), " ", h("code", {}, frame.tool || "?"), " ",
      h("span", { class: `badge ${status}` }, status)),
    frame.arguments && Object.keys(frame.arguments).length ? h("pre", { class: "tool-args" }, pretty(frame.arguments)) : null,
    frame.result ? h("pre", { class: "tool-result" }, readable(frame.result)) : null,
    attachments(fromMarkers(frame.result)));
}

// media a tool handed over (an MCP image): shown where the model got it, after the tool calls
function toolMedia(frame) {
  return h("div", { class: "tool-media", dataset: { tool: frame.tool || "" } }, attachments(fromMarkers(frame.text)));
}

class AssistantMessage {
  constructor(list, { label = t("chat.agent"), extraClass = "" } = {}) {
    this.text = "";
    this.reasoningBox = h("details", { class: "reasoning", hidden: true, open: true },
      h("summary", {}, t("chat.reasoning")), h("pre", {}));
    this.tools = h("div", { class: "tools" });
    this.notice = h("div", { class: "notice", hidden: true });
    this.content = h("div", { class: "content markdown" });
    this.meta = h("div", { class: "meta" });
    this.el = h("div", { class: `msg assistant streaming ${extraClass}` },
      h("div", { class: "who" }, label), this.reasoningBox, this.tools, this.notice, this.content, this.meta);
    list.append(this.el);
    this.pending = false;
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(async () => { this.pending = false; await renderMarkdown(this.content, this.text); });
  }

  frame(frame) {
    switch (frame.type) {
      case "accepted": this.el.dataset.inputId = frame.id; break;
      case "reasoning_delta":
        this.reasoningBox.hidden = false;
        this.reasoningBox.querySelector("pre").textContent += frame.text || "";
        break;
      case "content_delta":
        if (frame.reset) {
          this.text = "";
          this.notice.hidden = false;
          this.notice.textContent = t("chat.retrying");
        } else this.text += frame.text || "";
        this.schedule();
        break;
      case "tool_call": this.tools.append(toolCard(frame)); break;
      case "tool_media": this.tools.append(toolMedia(frame)); break;
      case "error":
        this.notice.hidden = false;
        this.notice.classList.add("error");
        this.notice.textContent = `${t("chat.error")}: ${frame.message || ""}`;
        break;
      case "response": return this.finish(frame);
      default: break;
    }
    return Promise.resolve();
  }

  async finish(frame) {
    this.el.classList.remove("streaming");
    this.text = frame.text || this.text;
    if (frame.interrupted) {
      this.notice.hidden = false;
      this.notice.textContent = t("chat.stopped");
      this.el.classList.add("interrupted");
    }
    await renderMarkdown(this.content, this.text);
    this.reasoningBox.open = false;
    const usage = frame.usage || {};
    clear(this.meta).append([frame.source, usage.total ? `${usage.total} tokens` : ""].filter(Boolean).join(" · "));
    if (frame.fallback_from) {
      this.el.append(h("div", { class: "notice fallback-note" }, t("chat.fallback", { source: frame.source, from: frame.fallback_from })));
    }
    this.el.classList.add(frame.ok === false && !frame.interrupted ? "failed" : "done");
  }
}

function userMessage(list, text, { interrupt = false, ts = 0, files = [] } = {}) {
  const el = h("div", { class: `msg user${interrupt ? " interrupt" : ""}` },
    h("div", { class: "who" }, interrupt ? `${t("chat.you")} · ${t("chat.interrupt")}` : t("chat.you")),
    h("div", { class: "content plain" }, text),
    attachments(files),
    ts ? h("div", { class: "meta" }, fmtTime(ts)) : null);
  list.append(el);
  return el;
}

export async function mount(root) {
  const list = h("div", { class: "messages", id: "messages", "aria-live": "polite" });
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
  root.append(h("section", { class: "chat" }, list, form));

  let busy = false;
  let files = [];
  const controller = new AbortController();

  function setBusy(value) {
    busy = value;
    stopBtn.hidden = !value;
    hint.hidden = !value;
    sendBtn.textContent = value ? t("chat.interrupt") : t("chat.send");
    sendBtn.classList.toggle("warn", value);
    root.dataset.busy = value ? "1" : "";
  }

  function scroll() { list.scrollTop = list.scrollHeight; }

  fileInput.addEventListener("change", () => {
    files = [...fileInput.files];
    attached.textContent = files.length ? t("chat.attached", { names: files.map((f) => f.name).join(", ") }) : "";
  });
  attachBtn.addEventListener("click", () => fileInput.click());

  stopBtn.addEventListener("click", async () => {
    try { await api("POST", "/api/v1/chat/cancel"); } catch (err) { toast(String(err.message || err), "error"); }
  });

  async function uploadNotes() {
    if (!files.length) return { note: "", media: [], shown: [] };
    const form = new FormData();
    for (const f of files) form.append("file", f, f.name);
    form.append("inject", "false");
    attached.textContent = t("chat.uploading");
    const res = await api("POST", "/api/v1/chat/file", form);
    files = [];
    fileInput.value = "";
    attached.textContent = "";
    // files kept in the media store go with the message as media: images reach the model as images
    const media = (res.files || []).filter((f) => f.media).map((f) => f.media.digest);
    return { note: res.note || "", media, shown: (res.files || []).map(fromUpload) };
  }

  async function submit() {
    let text = input.value.trim();
    if (busy) {
      if (!text) return;
      input.value = "";
      userMessage(list, text, { interrupt: true });
      scroll();
      try { await api("POST", "/api/v1/chat/interrupt", { text }); } catch (err) { toast(String(err.message || err), "error"); }
      return;
    }
    if (!text && !files.length) return;
    let notes = "";
    let media = [];
    let shown = [];
    const names = files.map((f) => f.name).join(", ");
    try { ({ note: notes, media, shown } = await uploadNotes()); } catch (err) { toast(String(err.message || err), "error"); return; }
    input.value = "";
    for (const el of list.querySelectorAll(".empty")) el.remove();
    userMessage(list, text || names, { files: shown });
    if (notes) text = text ? `${text}\n\n${notes}` : notes;
    const reply = new AssistantMessage(list);
    scroll();
    setBusy(true);
    try {
      const body = { text, client_msg_id: newId() };
      if (media.length) body.media = media;
      await postStream("/api/v1/chat/stream", body, async (frame) => {
        await reply.frame(frame);
        scroll();
      }, controller.signal);
    } catch (err) {
      if (err.name !== "AbortError") {
        reply.frame({ type: "error", message: err instanceof ApiError ? err.message : String(err) });
      }
    } finally {
      reply.el.classList.remove("streaming");
      setBusy(false);
      scroll();
    }
  }

  form.addEventListener("submit", (ev) => { ev.preventDefault(); submit(); });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); submit(); }
  });

  // history: built apart and put before whatever was sent while it loaded (the form works at once)
  try {
    const { messages } = await api("GET", "/api/v1/chat/history?limit=60");
    const older = document.createDocumentFragment();
    if (!messages.length && !list.querySelector(".msg")) older.append(h("p", { class: "muted empty" }, t("chat.empty")));
    for (const m of messages) {
      if (m.role === "user") userMessage(older, m.content, { ts: m.ts, files: fromMarkers(m.content) });
      else if (m.role === "assistant") {
        const msg = new AssistantMessage(older);
        for (const tool of m.tools || []) msg.tools.append(h("span", { class: "tag" }, "⚙ ", tool));
        const stopped = m.error === "turn interrupted";
        await msg.finish({ text: m.content, ok: !m.error || stopped, interrupted: stopped, source: m.channel });
        if (m.error && !stopped) { msg.notice.hidden = false; msg.notice.textContent = `${t("chat.error")}: ${m.error}`; }
      }
    }
    list.prepend(older);
  } catch (err) {
    list.append(h("p", { class: "error" }, t("common.error", { msg: err.message || err })));
  }
  scroll();

  // proactive messages (output_send__webui)
  const events = new EventSource("/api/v1/events?types=agent_output&since=now");
  events.addEventListener("agent_output", async (ev) => {
    const data = JSON.parse(ev.data).data || {};
    if (data.kind !== "channel_output" || data.channel !== "webui") return;
    const msg = new AssistantMessage(list, { extraClass: "proactive" });
    const file = data.file ? attachments([{ url: data.file.url, mime: data.file.mime, name: data.file.name }]) : null;
    await msg.finish({ text: file ? "" : data.text || "", ok: true, source: t("chat.proactive") });
    if (file) msg.content.after(file);
    scroll();
  });

  // tool calls waiting for you (this page's turns, other channels', sub-agents'): Allow once / Always / Deny
  const stopApprovals = await followApprovals(list, () => scroll());

  input.focus();
  return () => { events.close(); stopApprovals(); controller.abort(); };
}
