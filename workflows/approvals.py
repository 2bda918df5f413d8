"""Approval gates: what each risky step asks, how long it waits, and the safe default.

Called from `workflows/replica_loss.py`: the workflow opens a gate with `open_gate`,
the `approve` update (validated by `validate_approval`) or the `approve_signal` signal
decides it with `decide_gate`, and `expire_gate` applies the default on timeout. Every
default is the outcome under which doing nothing is safe: the risky act is not taken.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from workflows.types import ApprovalInput, Gate, GateKind, GateOutcome, IncidentState

# The survivors cannot wait a quarter of an hour for a shedding decision; everything else
# waits the configured timeout.
SHED_TIER_TIMEOUT_CAP_S = 300.0

ON_TIMEOUT: dict[GateKind, str] = {
    "force-delete": "the pod is not force-deleted; it keeps its grace period and post-mortem state",
    "shed-tier": "shedding stays at the automatic limit; nothing tighter is applied",
    "blast-radius": "the replica stays in routing; automatic derouting stops at the limit",
    "provision": "nothing is scaled; the workload controller's own replacement is awaited",
}


class ApprovalRejected(ValueError):
    """An approval the gate cannot take; the update validator rejects it with this message."""


def gate_timeout_s(kind: GateKind, configured_s: float) -> float:
    """The gate's timeout: the configured one, capped for gates the survivors cannot wait on."""
    if kind == "shed-tier":
        return min(configured_s, SHED_TIER_TIMEOUT_CAP_S)
    return configured_s


def open_gate(
    state: IncidentState,
    *,
    name: str,
    kind: GateKind,
    would_do: str,
    configured_timeout_s: float,
    now: datetime,
    evidence: dict[str, Any] | None = None,
) -> Gate:
    """Register a pending gate in the state (idempotent: reopening returns the same gate)."""
    if name in state.gates:
        return state.gates[name]
    timeout = gate_timeout_s(kind, configured_timeout_s)
    gate = Gate(
        name=name,
        kind=kind,
        would_do=would_do,
        on_timeout=ON_TIMEOUT[kind],
        timeout_s=timeout,
        opened_at=now,
        deadline=now + timedelta(seconds=timeout),
        evidence=evidence or {},
    )
    state.gates[name] = gate
    return gate


def validate_approval(state: IncidentState, request: ApprovalInput) -> None:
    """Refuse an unknown gate, a gate already decided, or an approval without a name."""
    if not request.approver.strip():
        raise ApprovalRejected("an approval needs the approver's name")
    gate = state.gates.get(request.gate)
    if gate is None:
        pending = sorted(n for n, g in state.gates.items() if g.pending)
        raise ApprovalRejected(
            f"no gate named {request.gate!r}; pending gates: {', '.join(pending) or 'none'}"
        )
    if not gate.pending:
        raise ApprovalRejected(
            f"gate {request.gate!r} was already decided: {gate.outcome}"
            + (f" by {gate.approver}" if gate.approver else "")
        )


def decide_gate(state: IncidentState, request: ApprovalInput, now: datetime) -> Gate:
    """Record an operator's decision on a pending gate (validated first)."""
    validate_approval(state, request)
    gate = state.gates[request.gate]
    gate.outcome = "approved" if request.approve else "rejected"
    gate.approver = request.approver.strip()
    gate.reason = request.reason
    gate.decided_at = now
    return gate


def close_gate(gate: Gate, outcome: GateOutcome, now: datetime) -> Gate:
    """Close a gate nobody answered: timed out, aborted, or never opened in a dry run."""
    if gate.pending:
        gate.outcome = outcome
        gate.decided_at = now
    return gate
