// The interactive graph of entities and relations (cytoscape from node_modules). Without the
// library the same data is shown as a list of relations, so the page still works.
import { clear, h } from "./dom.js";
import { t } from "./i18n.js";

let lib = null;
function load() {
  if (!lib) lib = import("/vendor/cytoscape/dist/cytoscape.esm.min.mjs").then((m) => m.default).catch(() => null);
  return lib;
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
}

function asList(container, data) {
  const list = h("ul", { class: "graph-list" });
  for (const e of data.edges) list.append(h("li", {}, h("b", {}, e.source), ` —${e.label || "?"}→ `, h("b", {}, e.target)));
  const linked = new Set(data.edges.flatMap((e) => [e.source, e.target]));
  for (const n of data.nodes) if (!linked.has(n.id)) list.append(h("li", {}, h("b", {}, n.label)));
  container.append(h("p", { class: "muted" }, t("memory.no_graph_lib")), list);
}

// Renders {nodes, edges}; calls onSelect(nodeId) when a node is tapped. Returns a destroy function.
export async function renderGraph(container, data, onSelect) {
  clear(container);
  const cytoscape = await load();
  if (!cytoscape) { asList(container, data); return () => {}; }
  const box = h("div", { class: "graph-canvas", id: "graph-canvas" });
  container.append(box);
  const cy = cytoscape({
    container: box,
    elements: [
      ...data.nodes.map((n) => ({ data: { id: n.id, label: n.label, type: n.type, weight: n.mentions || 1 } })),
      ...data.edges.map((e, i) => ({ data: { id: `e${i}`, source: e.source, target: e.target, label: e.label } })),
    ],
    style: [
      { selector: "node", style: {
        "background-color": cssVar("--accent"), label: "data(label)", color: cssVar("--fg"), "font-size": 15,
        "text-valign": "bottom", "text-margin-y": 4, width: "mapData(weight, 1, 20, 24, 52)", height: "mapData(weight, 1, 20, 24, 52)",
      } },
      { selector: "edge", style: {
        width: 1.5, "line-color": cssVar("--muted"), "target-arrow-color": cssVar("--muted"), "target-arrow-shape": "triangle",
        "curve-style": "bezier", label: "data(label)", "font-size": 12, color: cssVar("--muted"), "text-rotation": "autorotate",
      } },
      { selector: ":selected", style: { "background-color": cssVar("--warn"), "line-color": cssVar("--warn") } },
    ],
    layout: data.nodes.length > 150
      ? { name: "grid", padding: 24 }
      : { name: "cose", animate: false, padding: 30, idealEdgeLength: () => 90, nodeRepulsion: () => 300000,
          edgeElasticity: () => 80, randomize: false },
    wheelSensitivity: 0.3,
    minZoom: 0.2,
    maxZoom: 1.4,
  });
  cy.on("tap", "node", (ev) => onSelect && onSelect(ev.target.id()));
  container.dataset.nodes = String(cy.nodes().length);
  window.__haGraph = cy; // for tests and the console
  return () => cy.destroy();
}
