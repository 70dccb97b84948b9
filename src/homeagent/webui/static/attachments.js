// Images and files in chat bubbles: the user's uploads, files the agent sent to this page, and media a tool
// handed over. Media travel as markers ("[image/png 0123456789ab] a cat"); the bytes are at /files/<digest>,
// behind the same sign-in, digest-checked, and answer 410 with the description once they were evicted.
import { h } from "./dom.js";
import { t } from "./i18n.js";

const MARKER = /\[([a-z]+\/[\w.+-]+) ([0-9a-f]{12})\][ \t]*([^\n]*)/g;
const SHOWN_INLINE = new Set(["image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"]);

/** The media items named by marker lines in `text`: {url, mime, name}. */
export function fromMarkers(text) {
  const items = [];
  for (const [, mime, digest, description] of String(text || "").matchAll(MARKER)) {
    items.push({ url: `/files/${digest}`, mime, name: description.trim() || `${mime} ${digest}` });
  }
  return items;
}

/** An upload answer of POST /api/v1/chat/file as an item (the media store's copy when it kept one). */
export function fromUpload(file) {
  if (file.media && file.media.digest) {
    return { url: `/files/${file.media.digest}?name=${encodeURIComponent(file.name)}`, mime: file.media.mime, name: file.name };
  }
  return { url: file.url, mime: file.content_type, name: file.name };
}

function gone(link, name) {
  link.replaceWith(h("span", { class: "attachment gone muted" }, t("chat.file_gone", { name })));
}

/** Thumbnails (images the browser shows) and download links (everything else); null for no items. */
export function attachments(items) {
  if (!items || !items.length) return null;
  const box = h("div", { class: "attachments" });
  for (const item of items) {
    if (SHOWN_INLINE.has(item.mime)) {
      const img = h("img", { src: item.url, alt: item.name, title: item.name, loading: "lazy" });
      const link = h("a", { class: "attachment image", href: item.url, target: "_blank", rel: "noopener" }, img);
      img.addEventListener("error", () => gone(link, item.name));
      box.append(link);
    } else {
      box.append(h("a", { class: "attachment file", href: item.url, download: item.name }, "📎 ", item.name));
    }
  }
  return box;
}
