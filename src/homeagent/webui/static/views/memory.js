// Memory browser: the context timeline (L1), documents (L2), the graph of entities and
// relations (L3) as an interactive view, the media store, counts, and one search over all of them.
import { api } from "../api.js";
import { clear, fmtTime, h, pretty } from "../dom.js";
import { renderGraph } from "../graph.js";
import { t } from "../i18n.js";

const TABS = ["timeline", "documents", "graph", "media", "stats"];

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

function humanSize(n) {
  const units = ["B", "KB", "MB", "GB"];
  let v = Number(n) || 0, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return i ? `${v.toFixed(1)} ${units[i]}` : `${v} B`;
}

// One media item: a thumbnail while the bytes are there and are an image, its marker, size, state and references.
function mediaCard(m) {
  const refs = h("div", { class: "muted small media-refs" });
  const showRefs = async () => {
    const full = await api("GET", `/api/v1/memory/media/${m.digest}`);
    clear(refs).append(h("ul", {}, full.references.map((r) => h("li", {}, `${r.owner_kind} ${r.owner_id}`))));
  };
  const thumb = m.state === "present" && m.mime.startsWith("image/") && m.mime !== "image/svg+xml"
    ? h("img", { class: "media-thumb", src: m.url, alt: m.description || m.short, loading: "lazy" }) : null;
  return h("div", { class: `card media-card state-${m.state}`, dataset: { digest: m.digest } },
    thumb,
    h("div", { class: "meta" }, h("code", {}, m.short), " ", h("span", { class: "tag" }, m.mime), " ",
      humanSize(m.size), " · ", fmtTime(m.created), m.source ? ` · ${m.source}` : ""),
    m.description ? h("div", { class: "plain" }, m.description) : null,
    m.state !== "present" ? h("div", { class: "notice small" }, t("memory.media_gone", { state: m.state })) : null,
    h("button", { class: "small", onclick: showRefs }, t("memory.media_refs", { n: m.refs })),
    refs);
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
      } else if (tab === "media") {
        const data = await api("GET", "/api/v1/memory/media?limit=200");
        const st = data.stats;
        const items = q ? data.items.filter((m) => `${m.description} ${m.digest} ${m.mime}`.toLowerCase().includes(q.toLowerCase())) : data.items;
        clear(panel).append(
          h("p", { class: "muted" }, t("memory.media_summary", { n: st.present, size: humanSize(st.present_bytes), refs: st.references })),
          h("div", { class: "media-grid" }, ...(items.length ? items.map(mediaCard) : [h("p", { class: "muted" }, t("memory.empty"))])));
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
