// Approval requests: a tool call waiting for the owner, shown as a card with Allow once /
// Always for this pattern / Deny. Used by the chat page (live, from the event stream) and the
// Approvals page. Arguments arrive already cut and with invisible characters made visible.
import { api } from "./api.js";
import { clear, h, pretty, toast } from "./dom.js";
import { t } from "./i18n.js";

export function approvalCard(req) {
  const who = req.child ? t("approvals.child", { id: req.child }) : `${req.user_id || (["webui", "cli"].includes(req.channel) ? t("approvals.owner") : "?")} @ ${req.channel || "?"}`;
  const status = h("span", { class: "badge" }, t("approvals.waiting"));
  const buttons = h("div", { class: "approval-buttons" });
  const card = h("div", { class: "approval", dataset: { approval: req.id } },
    h("div", {}, h("code", {}, req.tool), " ", status, h("span", { class: "muted" }, ` ${who}`)),
    h("pre", { class: "tool-args" }, pretty(req.arguments || {})), buttons);
  async function answer(decision, always) {
    for (const b of buttons.querySelectorAll("button")) b.disabled = true;
    try {
      const res = await api("POST", `/api/v1/approvals/${encodeURIComponent(req.id)}`, { decision, always });
      decided(card, res.decision);
    } catch (err) {
      toast(err.message, "error");
      decided(card, "gone");
    }
  }
  // plugin installs, removals and enables are allowed one call at a time: no "Always" for them (req.always false)
  buttons.append(
    h("button", { class: "primary", dataset: { answer: "once" }, onclick: () => answer("allow", false) }, t("approvals.once")),
    req.always === false ? null
      : h("button", { dataset: { answer: "always" }, onclick: () => answer("allow", true) }, t("approvals.always", { pattern: req.pattern })),
    h("button", { class: "danger", dataset: { answer: "deny" }, onclick: () => answer("deny", false) }, t("approvals.deny")));
  return card;
}

export function decided(card, decision) {
  if (!card || card.dataset.decided) return;
  card.dataset.decided = decision;
  const badge = card.querySelector(".badge");
  badge.textContent = decision;
  badge.className = `badge ${decision.startsWith("allowed") ? "ok" : "denied"}`;
  clear(card.querySelector(".approval-buttons"));
}

// Keep `list` showing every waiting request: those already pending, then new ones as they come.
export async function followApprovals(list, onAdded = () => {}) {
  const cards = new Map();
  function add(req) {
    if (cards.has(req.id)) return;
    const card = approvalCard(req);
    cards.set(req.id, card);
    list.append(card);
    onAdded(card);
  }
  const events = new EventSource("/api/v1/events?types=approval_request,approval_decided&since=now");
  events.addEventListener("approval_request", (ev) => add(JSON.parse(ev.data).data || {}));
  events.addEventListener("approval_decided", (ev) => {
    const data = JSON.parse(ev.data).data || {};
    decided(cards.get(data.id), data.decision);
  });
  try { for (const req of (await api("GET", "/api/v1/approvals")).pending || []) add(req); } catch { /* shown when they arrive */ }
  return () => events.close();
}
