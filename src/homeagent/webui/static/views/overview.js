// Overview: daemon status, LLM sources (switch the preferred one), and the live event stream
// (EventSource reconnects by itself and replays what it missed through Last-Event-ID).
import { api } from "../api.js";
import { clear, fmtDuration, fmtTime, h, pretty, toast } from "../dom.js";
import { t } from "../i18n.js";

const MAX_EVENTS = 200;

function stat(label, value) {
  return h("div", { class: "stat" }, h("div", { class: "stat-label" }, label), h("div", { class: "stat-value" }, value));
}

// Whether commands, terminals and plugins are confined; the weaker mode is shown as a warning.
function sandboxStat(sb) {
  const el = stat(t("overview.sandbox"), sb.summary || sb.state || "?");
  el.id = "overview-sandbox";
  el.dataset.state = sb.state || "";
  if (sb.state && !sb.confined && sb.state !== "checking") el.classList.add("warn");
  return el;
}

export async function mount(root) {
  const stats = h("div", { class: "stats", id: "overview-stats" });
  const sources = h("div", { id: "overview-sources" });
  const log = h("div", { class: "event-log", id: "event-log" });
  root.append(
    h("h1", {}, t("overview.status")), stats,
    h("h2", {}, t("overview.sources")), sources,
    h("h2", {}, t("overview.events")), log,
  );

  async function load() {
    try {
      const s = await api("GET", "/api/v1/status");
      const agent = s.agent || {};
      clear(stats).append(
        stat(t("overview.version"), s.version),
        stat(t("overview.uptime"), fmtDuration(s.uptime_s || 0)),
        stat(t("overview.llm"), s.llm_source || "?"),
        stat(t("overview.agent"), `${agent.busy ? t("overview.busy") : t("overview.idle")} · ${agent.turns || 0} ${t("overview.turns")}`),
        stat(t("overview.tools"), String(s.tools ?? "")),
        sandboxStat(s.sandbox || {}),
      );
      const src = await api("GET", "/api/v1/llm/sources");
      const rows = (src.sources || []).map((x) => h("tr", {},
        h("td", {}, x.name, x.name === src.current ? h("span", { class: "badge ok" }, t("overview.current")) : null),
        h("td", {}, x.adapter || ""), h("td", {}, x.model || ""), h("td", {}, t(`setup.state.${x.state}`) === `setup.state.${x.state}` ? (x.state || "") : t(`setup.state.${x.state}`)),
        h("td", {}, x.name === src.current ? null : h("button", { class: "small", onclick: async () => {
          try { await api("POST", "/api/v1/llm/use", { name: x.name }); load(); } catch (err) { toast(err.message, "error"); }
        } }, t("overview.use")))));
      clear(sources).append(h("table", { class: "table" }, h("tbody", {}, rows)),
        ...(src.notes || []).map((n) => h("p", { class: "muted" }, n)));
    } catch (err) {
      clear(stats).append(h("p", { class: "error" }, t("common.error", { msg: err.message })));
    }
  }
  await load();
  const timer = setInterval(load, 15000);

  const events = new EventSource("/api/v1/events");
  const show = (ev) => {
    let item;
    try { item = JSON.parse(ev.data); } catch { return; }
    if (!item || !item.type) return;
    const summary = item.data && (item.data.text || item.data.tool || item.data.status || "");
    log.prepend(h("details", { class: "event", dataset: { type: item.type } },
      h("summary", {}, h("span", { class: "event-time" }, fmtTime(item.ts)), " ", h("span", { class: "tag" }, item.type),
        " ", h("span", { class: "event-summary" }, String(summary).slice(0, 160))),
      h("pre", {}, pretty(item.data))));
    while (log.childElementCount > MAX_EVENTS) log.lastElementChild.remove();
  };
  events.onmessage = show;
  for (const type of ["raw_input", "agent_output", "agent_llm_chain", "tool_call", "interrupt", "stage", "reasoning",
    "terminal_output", "plugin", "memory"]) events.addEventListener(type, show);

  return () => { clearInterval(timer); events.close(); };
}
