// Approvals: tool calls waiting for you, your "always" rules (with Remove), and the decision log.
import { api } from "../api.js";
import { followApprovals } from "../approvals.js";
import { clear, fmtTime, h, toast } from "../dom.js";
import { t } from "../i18n.js";

export async function mount(root) {
  const waiting = h("div", { id: "approvals-pending" });
  const rules = h("div", { id: "approvals-rules" });
  const log = h("div", { id: "approvals-log" });
  root.append(h("div", { class: "toolbar" }, h("h1", {}, t("nav.approvals")),
    h("button", { class: "ghost", onclick: () => load() }, t("common.refresh"))),
  h("h2", {}, t("approvals.pending")), waiting, h("h2", {}, t("approvals.rules")), rules,
  h("h2", {}, t("approvals.log")), log);

  async function remove(id) {
    try { await api("DELETE", `/api/v1/approvals/rules/${id}`); toast(t("approvals.removed", { id })); } catch (err) { toast(err.message, "error"); }
    load();
  }

  async function load() {
    try {
      const list = await api("GET", "/api/v1/approvals/rules");
      clear(rules).append(list.length ? h("table", {}, h("tr", {}, ["#", t("approvals.tool"), t("approvals.pattern"), t("approvals.by"), ""].map((c) => h("th", {}, c))),
        list.map((r) => h("tr", { dataset: { rule: r.id } }, h("td", {}, r.id), h("td", {}, h("code", {}, r.tool)), h("td", {}, h("code", {}, r.match)),
          h("td", {}, `${r.by} · ${fmtTime(r.created)}`), h("td", {}, h("button", { class: "danger", onclick: () => remove(r.id) }, t("approvals.remove"))))))
        : h("p", { class: "muted" }, t("approvals.no_rules")));
      const entries = await api("GET", "/api/v1/approvals/log?limit=100");
      clear(log).append(entries.length ? h("table", {}, h("tr", {}, [t("approvals.when"), t("approvals.decision"), t("approvals.tool"), t("approvals.subject"), t("approvals.who")].map((c) => h("th", {}, c))),
        entries.map((e) => h("tr", {}, h("td", {}, fmtTime(e.ts)), h("td", {}, h("span", { class: `badge ${e.decision.startsWith("allowed") ? "ok" : "denied"}` }, e.decision)),
          h("td", {}, h("code", {}, e.tool)), h("td", {}, h("code", {}, e.subject)), h("td", {}, `${e.user_id || "-"} @ ${e.channel || "-"}${e.by ? ` · ${e.by}` : ""}`))))
        : h("p", { class: "muted" }, t("approvals.no_log")));
    } catch (err) { toast(err.message, "error"); }
  }

  const stop = await followApprovals(waiting, (card) => card.addEventListener("click", () => setTimeout(load, 300)));
  await load();
  return stop;
}
