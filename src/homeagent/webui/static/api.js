// Talking to /api/v1: the session cookie goes along by itself; writes repeat the CSRF cookie
// in X-CSRF-Token. A 401 sends the browser back to the sign-in page. Every call says the page's
// language (X-HomeAgent-Lang), so the daemon's error messages come back in it.
import { currentLang } from "./i18n.js";

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

function cookie(name) {
  for (const part of document.cookie.split(";")) {
    const [key, ...rest] = part.trim().split("=");
    if (key === name) return decodeURIComponent(rest.join("="));
  }
  return "";
}

function toLogin() {
  const next = location.pathname + location.hash;
  location.href = "/login?next=" + encodeURIComponent(next);
}

export function headers(extra = {}, method = "GET") {
  const h = { "X-HomeAgent-Lang": currentLang(), ...extra };
  if (method !== "GET" && method !== "HEAD") h["X-CSRF-Token"] = cookie("homeagent_csrf");
  return h;
}

export async function api(method, path, body, { raw = false } = {}) {
  const init = { method, headers: headers({}, method), credentials: "same-origin" };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const res = await fetch(path, init);
  if (res.status === 401) { toLogin(); throw new ApiError(401, { error: "signed out" }); }
  if (raw) return res;
  let data = null;
  try { data = await res.json(); } catch { data = null; }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

// POST a JSON body and read the text/event-stream answer frame by frame.
export async function postStream(path, body, onFrame, signal) {
  const res = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }, "POST"),
    body: JSON.stringify(body),
    signal,
  });
  if (res.status === 401) { toLogin(); return; }
  if (!res.ok) {
    let data = null;
    try { data = await res.json(); } catch { data = null; }
    throw new ApiError(res.status, data);
  }
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) continue;
      try { onFrame(JSON.parse(data)); } catch (err) { console.warn("bad frame", err, data); }
    }
  }
}

export async function logout() {
  try { await api("POST", "/api/v1/logout"); } catch { /* signed out anyway */ }
  location.href = "/login";
}
