// The chat's bubbles, drawn the same way live (from a turn's frames) and after a reload (from the
// conversation's stored entries): a reload shows what the page showed.
import { attachments, fromMarkers } from "../attachments.js";
import { clear, fmtTime, h, pretty } from "../dom.js";
import { t } from "../i18n.js";
import { renderMarkdown } from "../markdown.js";

const UPLOAD_NOTE = /^\[file uploaded in the web UI: (.+) \(([^()]*)\), saved at [^\]]*\]$/;

function readable(result) {
  if (typeof result !== "string") return pretty(result);
  const text = result.trim();
  if (text.startsWith("{") || text.startsWith("[")) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch { /* shown as it is */ }
  }
  return result;
}

export function toolCard(frame) {
  const status = frame.status || "ok";
  return h("details", { class: `tool-call status-${status}`, dataset: { tool: frame.tool || "" } },
    h("summary", {}, h("span", { class: "tool-icon" }, "⚙"), " ", h("code", {}, frame.tool || "?"), " ",
      h("span", { class: `badge ${status}` }, status)),
    frame.arguments && Object.keys(frame.arguments).length ? h("pre", { class: "tool-args" }, pretty(frame.arguments)) : null,
    frame.result ? h("pre", { class: "tool-result" }, readable(frame.result)) : null,
    attachments(fromMarkers(frame.result)));
}

// media a tool handed over (an MCP image): shown where the model got it, after the tool calls
export function toolMedia(frame) {
  return h("div", { class: "tool-media", dataset: { tool: frame.tool || "" } }, attachments(fromMarkers(frame.text)));
}

// a stored entry's media (digest, mime, description) as the attachments the page showed
function storedMedia(media) {
  return (media || []).map((m) => ({
    url: `/files/${m.digest}${m.description ? `?name=${encodeURIComponent(m.description)}` : ""}`,
    mime: m.mime, name: m.description || m.digest.slice(0, 12),
  }));
}

export class AssistantMessage {
  constructor(list, { proactive = false, before = null } = {}) {
    this.text = "";
    this.reasoningBox = h("details", { class: "reasoning", hidden: true, open: true },
      h("summary", {}, t("chat.reasoning")), h("pre", {}));
    this.tools = h("div", { class: "tools" });
    this.notice = h("div", { class: "notice", hidden: true });
    this.content = h("div", { class: "content markdown" });
    this.meta = h("div", { class: "meta" });
    this.actions = h("div", { class: "msg-actions" });
    const who = proactive ? `${t("chat.agent")} · ${t("chat.proactive")}` : t("chat.agent");
    this.el = h("div", { class: `msg assistant streaming${proactive ? " proactive" : ""}` },
      h("div", { class: "who" }, who), this.reasoningBox, this.tools, this.notice, this.content, this.meta, this.actions);
    if (before) list.insertBefore(this.el, before); else list.append(this.el);
    this.pending = false;
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(async () => { this.pending = false; await renderMarkdown(this.content, this.text); });
  }

  showReasoning(text) {
    this.reasoningBox.hidden = false;
    this.reasoningBox.querySelector("pre").textContent = text;
  }

  frame(frame) {
    switch (frame.type) {
      case "accepted":
        this.el.dataset.inputId = frame.id;
        if (frame.reply_entry) this.el.dataset.entry = frame.reply_entry;
        break;
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
      case "error": this.error(frame.message || ""); break;
      case "response": return this.finish(frame);
      default: break;
    }
    return Promise.resolve();
  }

  error(message) {
    this.notice.hidden = false;
    this.notice.classList.add("error");
    this.notice.textContent = `${t("chat.error")}: ${message}`;
  }

  async finish(frame) {
    this.el.classList.remove("streaming");
    // a stopped reply keeps the text that had streamed (frame.partial), marked stopped
    this.text = frame.text || frame.partial || this.text;
    if (frame.interrupted) {
      this.notice.hidden = false;
      this.notice.classList.remove("error");
      this.notice.textContent = frame.lost ? t("chat.lost") : t("chat.stopped");
      this.el.classList.add("interrupted");
    }
    await renderMarkdown(this.content, this.text);
    this.reasoningBox.open = false;
    const usage = frame.usage || {};
    clear(this.meta).append([frame.source, usage.total ? `${usage.total} tokens` : "", frame.ts ? fmtTime(frame.ts) : ""]
      .filter(Boolean).join(" · "));
    if (frame.fallback_from) {
      this.el.append(h("div", { class: "notice fallback-note" }, t("chat.fallback", { source: frame.source, from: frame.fallback_from })));
    }
    this.el.classList.add(frame.ok === false && !frame.interrupted ? "failed" : "done");
  }
}

// The owner's message: its text, with its uploads as thumbnails (images the media store kept) or attachment
// chips (the upload notes the model reads, for the other files).
export function userMessage(list, text, { interrupt = false, ts = 0, entry = null, before = null, media = [] } = {}) {
  const lines = String(text || "").split("\n");
  const files = [];
  const kept = [];
  const shownAsMedia = new Set(media.map((m) => m.name));
  for (const line of lines) {
    const m = UPLOAD_NOTE.exec(line.trim());
    if (m && !shownAsMedia.has(m[1])) files.push(`${m[1]} (${m[2]})`); else if (!m) kept.push(line);
  }
  const shown = kept.join("\n").trim();
  const el = h("div", { class: `msg user${interrupt ? " interrupt" : ""}`, dataset: entry ? { entry } : {} },
    h("div", { class: "who" }, interrupt ? `${t("chat.you")} · ${t("chat.interrupt")}` : t("chat.you")),
    shown ? h("div", { class: "content plain" }, shown) : null,
    attachments(media),
    files.length ? h("div", { class: "attachments" }, files.map((f) => h("span", { class: "tag file-chip" }, f))) : null,
    h("div", { class: "meta" }, ts ? fmtTime(ts) : ""),
    h("div", { class: "msg-actions" }));
  el.dataset.text = text;
  if (before) list.insertBefore(el, before); else list.append(el);
  return el;
}

// One stored entry of a conversation, drawn as the page drew it live.
export async function renderEntry(list, entry, { before = null } = {}) {
  if (entry.kind === "user" || entry.kind === "interrupt") {
    return userMessage(list, entry.text, { interrupt: entry.kind === "interrupt", ts: entry.ts, entry: entry.id, before,
      media: storedMedia(entry.media) });
  }
  const proactive = entry.kind === "proactive";
  const msg = new AssistantMessage(list, { proactive, before });
  msg.el.dataset.entry = entry.id;
  if (entry.input_id) msg.el.dataset.inputId = entry.input_id;
  if (entry.reasoning) msg.showReasoning(entry.reasoning);
  for (const tool of entry.tools || []) msg.tools.append("media" in tool ? toolMedia({ tool: tool.tool, text: tool.media }) : toolCard(tool));
  if (entry.retried) { msg.notice.hidden = false; msg.notice.textContent = t("chat.retrying"); }
  if (entry.file && entry.file.url) {  // a file the agent sent to the page
    msg.content.after(attachments([{ url: entry.file.url, mime: entry.file.mime, name: entry.file.name || entry.file.digest }]));
  }
  if (entry.pending) {  // still running (in another tab, or before this reload)
    msg.text = entry.text || "";
    msg.el.classList.add("pending");
    msg.content.textContent = t("chat.pending");
    return msg.el;
  }
  await msg.finish({
    text: entry.text, ok: !entry.error, interrupted: Boolean(entry.stopped), lost: Boolean(entry.lost),
    source: proactive ? "" : entry.source, usage: entry.usage, fallback_from: entry.fallback_from, ts: entry.ts,
  });
  if (entry.error) msg.error(entry.error);
  return msg.el;
}
