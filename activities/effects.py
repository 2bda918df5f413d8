"""The ledger-guarded wrapper every mutating activity goes through.

Called from the mutating activities in `activities/` (cluster, gateway, notify): each
builds an `OperationSpec` with the op id the workflow derived, and passes `apply` (the
effect, idempotent by op id: stamp it on the object, check the stamp first) and
`confirm` (the observed evidence, or None while the effect is not visible yet) to
`EffectRunner.run`. The ledger makes sure `apply` runs once across retries and workers;
see `ledger.store` for the crash windows and how each is closed.

`OperationSpec` is the ledger's own model (`ledger.spec`, pydantic only), re-exported
here so workflows can build specs without importing SQLAlchemy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from ledger.errors import (
    LedgerError,
    OperationFailed,
    OperationInProgress,
    PermanentEffectError,
)
from ledger.spec import OperationSpec, parse_k8s_ref

if TYPE_CHECKING:
    from ledger.store import Ledger, RunOutcome

STAMP_ANNOTATION = "fleetmend.io/op-id"  # the op id stamped on every object fleetmend changes


class EffectResult(BaseModel):
    """What became of one operation: its ledger state and the observed result."""

    op_id: str
    state: str  # proposed (dry run) | applied | confirmed | compensated
    applied_now: bool  # this call performed the effect (False on a retry that found it done)
    result: dict[str, Any] = Field(default_factory=dict)  # evidence if confirmed, else apply's
    attempts: int = 0
    recovered: bool = False  # an earlier attempt's effect was found and recorded, not re-applied
    dry_run: bool = False
    applied_result: dict[str, Any] = Field(default_factory=dict)  # what apply returned
    evidence: dict[str, Any] | None = None  # what confirm observed, once confirmed


def _heartbeat(op_id: str) -> None:
    # Keeps the activity alive while it waits for another worker's claim on the same op.
    try:
        from temporalio import activity
    except ImportError:  # the ledger is usable without Temporal (tests, the intake)
        return
    if activity.in_activity():
        activity.heartbeat(op_id)


class EffectRunner:
    """Runs effects through the ledger. One per worker; thread-safe.

    `confirm_attempts`/`confirm_interval`: how often `run` polls `confirm` before leaving
    the operation `applied` (the reconciler confirms it later, or reports it).
    """

    def __init__(
        self,
        ledger: Ledger,
        *,
        confirm_attempts: int = 1,
        confirm_interval: float = 0.5,
        wait: float | None = None,
    ) -> None:
        self.ledger = ledger
        self.confirm_attempts = max(1, confirm_attempts)
        self.confirm_interval = confirm_interval
        self.wait = wait

    def run(
        self,
        spec: OperationSpec,
        apply: Callable[[str], Mapping[str, Any] | None],
        confirm: Callable[[str], Mapping[str, Any] | None] | None = None,
    ) -> EffectResult:
        """Apply `spec` at most once; return its state and the observed result.

        Raises `InvalidOperationSpec` (nothing written), `OperationConflict` and
        `OperationFailed` (permanent), `OperationInProgress` (temporary: another worker
        is applying it) or whatever `apply` raised; `PermanentEffectError` from `apply`
        marks the operation failed.
        """
        outcome = self.ledger.run_once(
            spec,
            apply,
            None if confirm is None else self._polling(confirm),
            wait=self.wait,
            on_wait=lambda: _heartbeat(spec.op_id),
        )
        return to_result(outcome)

    def _polling(
        self, confirm: Callable[[str], Mapping[str, Any] | None]
    ) -> Callable[[str], Mapping[str, Any] | None]:
        def poll(op_id: str) -> Mapping[str, Any] | None:
            for attempt in range(self.confirm_attempts):
                evidence = confirm(op_id)
                if evidence is not None:
                    return evidence
                if attempt + 1 < self.confirm_attempts:
                    _heartbeat(op_id)
                    time.sleep(self.confirm_interval)
            return None

        return poll


def to_result(outcome: RunOutcome) -> EffectResult:
    record = outcome.record
    observed = record.evidence if record.state == "confirmed" else record.result
    if record.dry_run:
        observed = {"dry_run": True, "intent": record.intent}
    return EffectResult(
        op_id=record.op_id,
        state=record.state,
        applied_now=outcome.applied_now,
        result=dict(observed or {}),
        attempts=record.attempts,
        recovered=outcome.recovered,
        dry_run=record.dry_run,
        applied_result=dict(record.result or {}),
        evidence=None if record.evidence is None else dict(record.evidence),
    )


__all__ = [
    "STAMP_ANNOTATION",
    "EffectResult",
    "EffectRunner",
    "LedgerError",
    "OperationFailed",
    "OperationInProgress",
    "OperationSpec",
    "PermanentEffectError",
    "parse_k8s_ref",
    "to_result",
]
