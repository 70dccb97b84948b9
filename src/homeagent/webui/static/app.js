// The single-page app: a hash router over plain ES modules (no build step).
import { api, logout } from "./api.js";
import { clear, fmtDuration, h } from "./dom.js";
import { applyI18n, currentLang, setLang, t } from "./i18n.js";
import { applyTheme, toggleTheme } from "./theme.js";

const VIEWS = {
  chat: () => import("./views/chat.js"),
  overview: () => import("./views/overview.js"),
  settings: () => import("./views/settings.js"),
  plugins: () => import("./views/plugins.js"),
  memory: () => import("./views/memory.js"),
  knowledge: () => import("./views/knowledge.js"),
  adapters: () => import("./views/adapters.js"),
  approvals: () => import("./views/approvals.js"),
  setup: () => import("./views/setup.js"),
  mcp: () => import("./views/mcp.js"),
  skills: () => import("./views/skills.js"),
};

let unmount = null;
let generation = 0;

async function route() {
  const name = (location.hash.replace(/^#\/?/, "").split("/")[0]) || "chat";
  const key = VIEWS[name] ? name : "chat";
  const mine = ++generation;
  for (const link of document.querySelectorAll(".sidebar a[data-view]")) {
    link.classList.toggle("active", link.dataset.view === key);
    if (link.dataset.view === key) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  if (unmount) { try { unmount(); } catch (err) { console.warn(err); } unmount = null; }
  const root = clear(document.getElementById("view"));
  root.dataset.view = key;
  root.append(h("p", { class: "muted" }, t("common.loading")));
  const mod = await VIEWS[key]();
  if (mine !== generation) return;
  clear(root);
  const cleanup = await mod.mount(root);
  if (mine !== generation) { if (typeof cleanup === "function") cleanup(); return; }
  unmount = typeof cleanup === "function" ? cleanup : null;
  applyI18n(root);
}

async function refreshStatus() {
  const line = document.getElementById("status-line");
  try {
    const s = await api("GET", "/api/v1/status");
    const agent = s.agent || {};
    clear(line).append(
      h("span", { class: `dot ${agent.busy ? "busy" : "ok"}` }),
      ` ${s.llm_source || "?"} · ${agent.busy ? t("overview.busy") : t("overview.idle")} · ${fmtDuration(s.uptime_s || 0)}`,
    );
  } catch {
    clear(line).append(h("span", { class: "dot down" }), ` ${t("common.offline")}`);
  }
}

// With no LLM configured, the first page shown is the setup page (unless a page was asked for by its link).
async function firstRun() {
  if (location.hash && location.hash !== "#/") return;
  try {
    const data = await api("GET", "/api/v1/llm/presets");
    if (!data.configured && !sessionStorage.getItem("ha-setup-seen")) {
      sessionStorage.setItem("ha-setup-seen", "1");
      history.replaceState(null, "", "#/setup");
    }
  } catch { /* an older daemon: no setup page */ }
}

function start() {
  applyTheme();
  setLang(currentLang(), { remember: false });  // the browser's language until the user picks one
  document.getElementById("theme-toggle").addEventListener("click", () => toggleTheme());
  document.getElementById("lang-toggle").addEventListener("click", () => {
    setLang(currentLang() === "zh" ? "en" : "zh");
    route();
  });
  document.getElementById("logout").addEventListener("click", () => logout());
  window.addEventListener("hashchange", route);
  firstRun().then(route);
  refreshStatus();
  setInterval(refreshStatus, 10000);
}

start();
