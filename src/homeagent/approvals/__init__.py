"""Approvals: a policy per tool (allow / ask / deny), owner answers, ``always`` rules and a decision log."""

from homeagent.approvals.broker import ApprovalBroker, ApprovalError, OwnerPath, PendingApproval
from homeagent.approvals.policy import DEFAULT_ASK, ApprovalPolicy, PolicyConfig, Rule
from homeagent.approvals.store import ApprovalStore

__all__ = [
    "DEFAULT_ASK",
    "ApprovalBroker",
    "ApprovalError",
    "ApprovalPolicy",
    "ApprovalStore",
    "OwnerPath",
    "PendingApproval",
    "PolicyConfig",
    "Rule",
]
