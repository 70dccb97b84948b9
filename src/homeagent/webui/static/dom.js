// A tiny element builder: h("div", {class: "x", onclick: fn}, "text", child). Text is always text,
// never HTML: the only HTML that reaches the page goes through markdown.js (DOMPurify).

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "value") el.value = value;
    else if (key === "checked") el.checked = Boolean(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

export function fmtTime(ts) {
  if (!ts) return "";
  const d = new Date(ts * 1000);
  return d.toLocaleString(document.documentElement.lang || undefined);  // in the page's language, not the OS's
}

// A short date for lists, in the page's language: the time today, the day this year, the full date before.
export function fmtDay(ts) {
  if (!ts) return "";
  const d = new Date(ts * 1000);
  const now = new Date();
  const lang = document.documentElement.lang || undefined;
  if (d.toDateString() === now.toDateString()) return d.toLocaleTimeString(lang, { hour: "2-digit", minute: "2-digit" });
  if (d.getFullYear() === now.getFullYear()) return d.toLocaleDateString(lang, { month: "short", day: "numeric" });
  return d.toLocaleDateString(lang, { year: "numeric", month: "short", day: "numeric" });
}

export function fmtDuration(seconds) {
  const s = Math.floor(seconds);
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return (d ? `${d}d ` : "") + (hh || d ? `${hh}h ` : "") + `${m}m ${s % 60}s`;
}

export function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

export function toast(message, kind = "info") {
  let box = document.getElementById("toasts");
  if (!box) { box = h("div", { id: "toasts" }); document.body.append(box); }
  const item = h("div", { class: `toast ${kind}`, role: "status" }, message);
  box.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 3500);
}
