import { applyI18n, currentLang, setLang, t } from "./i18n.js";
import { applyTheme } from "./theme.js";

applyTheme();
setLang(currentLang());

function nextUrl() {
  const next = new URLSearchParams(location.search).get("next") || "/";
  // only same-origin paths: "/x", never "//host" or "https://…"
  const path = next.startsWith("/") && !next.startsWith("//") && !next.includes("\\") ? next : "/";
  // the server never sees the #/view part; the browser kept it through the redirect
  return path.includes("#") ? path : path + location.hash;
}

if (new URLSearchParams(location.search).get("error")) {
  const error = document.getElementById("login-error");
  error.textContent = t("login.wrong");
  error.hidden = false;
}

document.getElementById("lang-toggle").addEventListener("click", () => {
  setLang(currentLang() === "zh" ? "en" : "zh");
  applyI18n(document);
});

document.getElementById("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const error = document.getElementById("login-error");
  const button = document.getElementById("login-submit");
  error.hidden = true;
  button.disabled = true;
  try {
    const res = await fetch("/api/v1/login", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-HomeAgent-Lang": currentLang() },
      body: JSON.stringify({ token: document.getElementById("token").value.trim() }),
    });
    if (res.ok) { location.href = nextUrl(); return; }
    const body = await res.json().catch(() => ({}));
    error.textContent = res.status === 429 ? t("login.limited", { s: body.retry_after || 60 }) : t("login.wrong");
    error.hidden = false;
  } catch (err) {
    error.textContent = String(err);
    error.hidden = false;
  } finally {
    button.disabled = false;
  }
});
