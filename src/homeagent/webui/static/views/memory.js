// Memory browser: the context timeline (L1), documents (L2), the graph of entities and
// relations (L3) as an interactive view, counts, and one search over all of them.
import { api } from "../api.js";
import { clear, fmtTime, h, pretty } from "../dom.js";
import { renderGraph } from "../graph.js";
import { t } from "../i18n.js";

const TABS = ["timeline", "documents", "graph", "stats"];

function unavailable(box, err) {
  clear(box).append(h("p", { class: err.status === 501 ? "notice" : "error" },
    err.status === 501 ? t("common.unavailable", { msg: err.body.missing || err.message }) : t("common.error", { msg: err.message })));
}

function eventCard(e) {
  return h("div", { class: `card event-card kind-${e.kind}` },
    h("div", { class: "meta" }, h("span", { class: "tag" }, e.kind), " ", fmtTime(e.ts), e.channel ? ` · ${e.channel}` : ""),
    e.input ? h("div", { class: "plain" }, e.input) : null,
    e.response ? h("div", { class: "plain reply" }, e.response) : null,
    (e.tool_outputs || []).length ? h("div", { class: "muted small" }, "⚙ ", e.tool_outputs.map((o) => o.tool).join(", ")) : null);
}

function docCard(d) {
  return h("div", { class: "card doc-card" },
    h("div", { class: "meta" }, d.id ? h("code", {}, String(d.id).slice(0, 12)) : null, " ", fmtTime(d.ts || d.created_at),
      d.score !== undefined ? ` · ${Number(d.score).toFixed(3)}` : ""),
    d.summary ? h("b", {}, d.summary) : null,
    h("div", { class: "plain" }, String(d.content || d.text || "").slice(0, 1200)));
}

export async function mount(root) {
  const search = h("input", { type: "search", id: "memory-search", "data-i18n-placeholder": "memory.search" });
  const depth = h("select", { id: "memory-depth", "aria-label": t("memory.depth") }, ...[1, 2, 3].map((d) => h("option", { value: d, selected: d === 2 }, `${t("memory.depth")} ${d}`)));
  const tabs = h("div", { class: "tabs", role: "tablist" });
  const panel = h("div", { class: "tab-panel", id: "memory-panel" });
  root.append(h("div", { class: "toolbar" }, h("h1", {}, t("nav.memory")), search, depth), tabs, panel);

  let current = "timeline";
  let destroyGraph = () => {};

  async function show(tab) {
    current = tab;
    destroyGraph(); destroyGraph = () => {};
    for (const b of tabs.children) b.setAttribute("aria-selected", String(b.dataset.tab === tab));
    clear(panel).append(h("p", { class: "muted" }, t("common.loading")));
    const q = search.value.trim();
    try {
      if (tab === "timeline") {
        const data = q ? { events: (await api("GET", `/api/v1/memory/search?q=${encodeURIComponent(q)}`)).context || [] }
          : await api("GET", "/api/v1/memory/context?limit=200");
        clear(panel).append(...(data.events.length ? data.events.slice().reverse().map(eventCard) : [h("p", { class: "muted" }, t("memory.empty"))]));
      } else if (tab === "documents") {
        const data = await api("GET", `/api/v1/memory/documents?limit=30${q ? `&q=${encodeURIComponent(q)}` : ""}`);
        clear(panel).append(...(data.documents.length ? data.documents.map(docCard) : [h("p", { class: "muted" }, t("memory.empty"))]));
      } else if (tab === "graph") {
        const data = await api("GET", `/api/v1/memory/graph?depth=${depth.value}${q ? `&q=${encodeURIComponent(q)}` : ""}`);
        const box = h("div", { class: "graph", id: "memory-graph" });
        const detail = h("div", { class: "graph-detail muted" });
        clear(panel).append(box, detail);
        if (!data.nodes.length) { box.append(h("p", { class: "muted" }, t("memory.empty"))); return; }
        destroyGraph = await renderGraph(box, data, (id) => {
          const rel = data.edges.filter((e) => e.source === id || e.target === id);
          clear(detail).append(h("b", {}, id), h("ul", {}, rel.map((e) => h("li", {}, `${e.source} —${e.label}→ ${e.target}`))));
        });
      } else {
        const data = await api("GET", "/api/v1/memory/stats");
        clear(panel).append(...Object.entries(data).map(([k, v]) => h("div", { class: "card" }, h("h3", {}, k), h("pre", {}, pretty(v)))));
      }
    } catch (err) { unavailable(panel, err); }
  }

  for (const tab of TABS) {
    tabs.append(h("button", { role: "tab", class: "tab", dataset: { tab }, onclick: () => show(tab) }, t(`memory.${tab}`)));
  }
  search.addEventListener("keydown", (ev) => { if (ev.key === "Enter") show(current); });
  depth.addEventListener("change", () => { if (current === "graph") show("graph"); });
  const initial = (location.hash.split("/")[2] || "timeline");
  await show(TABS.includes(initial) ? initial : "timeline");
  return () => destroyGraph();
}
