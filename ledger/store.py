"""The operation-id ledger: every external effect is proposed, applied and confirmed at most once.

Called from `activities.effects.EffectRunner` (fleetmend's own remediation effects) and
from the intake's action endpoint (actions applications propose from inference
requests). Temporal runs activities at least once; this module turns that into "applied
once" for each caller-chosen operation id.

How `run_once(spec, apply, confirm)` goes:

0. *Look*: one read. A retry usually finds the operation applied or confirmed and stops
   there (running only ``confirm`` if it is not confirmed yet): nothing is written.
1. *Propose and claim*: ``INSERT ... ON CONFLICT (op_id) DO NOTHING`` writes the new row
   already claimed by this worker (a lease: ``claim_token``, ``claim_expires_at``), its
   incident in the same statement. If the row existed, a conditional ``UPDATE`` claims it
   only while it is `proposed` and no other worker holds a live lease (``claim_expires_at
   > now()``). Postgres serialises racing INSERTs and UPDATEs on the row; the loser sees
   the committed row, with its lease, and does not claim. One worker holds a live claim.
2. *Apply*: only the claim holder calls ``apply(op_id)``. Everyone else waits for the
   holder to record its result, or takes over once its lease expired.
3. *Record applied*, committed before anything else happens.
4. *Confirm*: ``confirm(op_id)`` returns evidence once the observed state shows the
   effect; the ledger records `confirmed` with it. Without evidence the operation stays
   `applied` and a later attempt, or the reconciler, confirms it.

Crash windows, and how each is closed:

- *Before the proposal commits*: nothing recorded, nothing applied; the retry starts over.
- *proposed, not applied* (crash after the claim, before or during ``apply``): the row
  is `proposed` with ``attempts >= 1`` and a lease that runs out. The retry claims it once
  the lease has expired (an exception in ``apply`` releases the lease at once) and
  applies. If nobody retries, reconciliation reports it as an orphan after the grace.
- *applied, not recorded* (the effect happened, the process died before step 3): the
  ledger cannot know; no transaction spans Postgres and Kubernetes. Two guards close it.
  First, a retry that claims an operation a previous attempt had claimed asks
  ``confirm(op_id)`` before applying: if the effect is already visible, it is recorded
  as applied and confirmed and ``apply`` is not called. Second, ``apply`` receives the op
  id and must itself be idempotent: for Kubernetes it stamps the op id on the object (an
  annotation) in the same write as the effect, and checks the stamp before acting, so a
  re-run finds the stamp and returns the observed state without acting again.
  (tests/ledger/test_crash_windows.py kills a worker in exactly this window.)
- *recorded, not confirmed*: the row is `applied`. A retry never re-applies an applied
  operation; it only runs ``confirm`` again. If the effect never shows, reconciliation
  reports the operation as an orphan after the grace period.
- *a slow worker outlives its lease*: a second worker takes over and calls the
  idempotent ``apply``; whichever records first wins, the other's record is a no-op.
  A live worker renews its lease every third of it while ``apply`` and ``confirm`` run,
  so the lease can be short (a dead worker's claim frees up quickly) without a slow
  apply losing its claim.

Every write is a single statement run in autocommit (a transition that undoes another
operation marks it compensated in the same statement, through a data-modifying CTE), so
each is atomic without BEGIN/COMMIT round trips; a fresh operation costs four round trips.

States: proposed -> applied -> confirmed; failed (``apply`` raised PermanentEffectError,
or `fail()`); compensated (an operation whose ``compensates`` names this one was
applied). A failed or compensated operation is never applied again under the same op id.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel
from sqlalchemy import (
    Connection,
    Engine,
    Interval,
    Row,
    bindparam,
    create_engine,
    false,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB, insert as pg_insert

from ledger.errors import (
    InvalidOperationSpec,
    InvalidTransition,
    OperationConflict,
    OperationFailed,
    OperationInProgress,
    PermanentEffectError,
    UnknownOperation,
)
from ledger.models import incidents, operations
from ledger.spec import ActionSpec, OperationSpec, json_safe, validate_spec

Apply = Callable[[str], Mapping[str, Any] | None]
Confirm = Callable[[str], Mapping[str, Any] | None]

_o = operations.c
_CLAIM_REMAINING = func.extract("epoch", _o.claim_expires_at - func.now()).label("claim_remaining")
_JSON = JSONB(none_as_null=True)

# The statements are built once: building SQLAlchemy constructs per call costs more client
# CPU than the round trips they make.
_SELECT = select(operations, _CLAIM_REMAINING).where(_o.op_id == bindparam("p_op_id"))
# One statement proposes (and, unless told otherwise, claims) a new operation and records
# its incident: a fresh operation is the common case and costs one round trip. On a
# conflict nothing is written and the caller reads the existing row.
_PROPOSE = text(
    """
WITH incident AS (
    INSERT INTO incidents (incident_id)
    SELECT CAST(:incident_id AS text) WHERE CAST(:incident_id AS text) IS NOT NULL
    ON CONFLICT (incident_id) DO NOTHING
)
INSERT INTO operations (op_id, incident_id, origin, kind, target, intent, compensates,
                        dry_run, emergency, attempts, claim_token, claimed_at, claim_expires_at)
VALUES (:op_id, :incident_id, :origin, :kind, :target, CAST(:intent AS jsonb), :compensates,
        :dry_run, :emergency,
        CASE WHEN :claim THEN 1 ELSE 0 END,
        CASE WHEN :claim THEN CAST(:token AS text) END,
        CASE WHEN :claim THEN now() END,
        CASE WHEN :claim THEN now() + make_interval(secs => :lease) END)
ON CONFLICT (op_id) DO NOTHING
RETURNING op_id, claim_token, attempts
"""
)
_CLAIM = (
    update(operations)
    .where(
        _o.op_id == bindparam("p_op_id"),
        _o.state == "proposed",
        _o.dry_run == false(),
        (_o.claim_expires_at.is_(None)) | (_o.claim_expires_at <= func.now()),
    )
    .values(
        attempts=_o.attempts + 1,
        claim_token=bindparam("p_token"),
        claimed_at=func.now(),
        claim_expires_at=func.now() + bindparam("p_lease", type_=Interval()),
        updated_at=func.now(),
    )
    .returning(_o.op_id, _o.claim_token, _o.attempts)
)
# The operation is still proposed and this caller's claim token still holds it.
_STILL_OURS = (
    _o.op_id == bindparam("p_op_id"),
    _o.claim_token == bindparam("p_token"),
    _o.state == "proposed",
)
_RENEW = (
    update(operations)
    .where(*_STILL_OURS)
    .values(claim_expires_at=func.now() + bindparam("p_lease", type_=Interval()))
)
_RELEASE = (
    update(operations)
    .where(*_STILL_OURS)
    .values(
        claim_token=None, claim_expires_at=None, error=bindparam("p_error"), updated_at=func.now()
    )
)
_MARK_APPLIED = (
    update(operations)
    .where(_o.op_id == bindparam("p_op_id"), _o.state == "proposed", _o.dry_run == false())
    .values(
        state="applied",
        applied_at=func.now(),
        result=bindparam("p_result", type_=_JSON),
        claim_token=None,
        claim_expires_at=None,
        error=None,
        updated_at=func.now(),
    )
    .returning(operations)
)
_CONFIRM = (
    update(operations)
    .where(
        _o.op_id == bindparam("p_op_id"),
        _o.state.in_(("proposed", "applied")),
        _o.dry_run == false(),
    )
    .values(
        state="confirmed",
        applied_at=func.coalesce(_o.applied_at, func.now()),
        confirmed_at=func.now(),
        evidence=bindparam("p_evidence", type_=_JSON),
        result=func.coalesce(bindparam("p_result", type_=_JSON), _o.result),
        claim_token=None,
        claim_expires_at=None,
        updated_at=func.now(),
    )
    .returning(operations)
)
_FAIL = (
    update(operations)
    .where(_o.op_id == bindparam("p_op_id"), _o.state.in_(("proposed", "applied")))
    .values(
        state="failed",
        failed_at=func.now(),
        error=bindparam("p_error"),
        claim_token=None,
        claim_expires_at=None,
        updated_at=func.now(),
    )
    .returning(operations)
)
_MARK_COMPENSATED = (
    update(operations)
    .where(_o.op_id == bindparam("p_op_id"), _o.state != "compensated")
    .values(
        state="compensated",
        compensated_at=func.now(),
        claim_token=None,
        claim_expires_at=None,
        updated_at=func.now(),
    )
)


def _and_compensate(transition: Any) -> Any:
    """`transition` (an UPDATE ... RETURNING the row), plus, in the same statement, marking
    the operation it compensates as compensated: one atomic round trip."""
    changed = transition.cte("changed")
    undone = (
        update(operations)
        .where(
            _o.op_id == select(changed.c.compensates).scalar_subquery(),
            _o.state != "compensated",
        )
        .values(
            state="compensated",
            compensated_at=func.now(),
            claim_token=None,
            claim_expires_at=None,
            updated_at=func.now(),
        )
        .cte("undone")
    )
    return select(changed).add_cte(undone)


_MARK_APPLIED = _and_compensate(_MARK_APPLIED)
_CONFIRM = _and_compensate(_CONFIRM)


@dataclass(frozen=True)
class OperationRecord:
    """A snapshot of one operation row."""

    op_id: str
    incident_id: str | None
    origin: str
    kind: str
    target: str
    intent: dict[str, Any]
    state: str
    compensates: str | None
    dry_run: bool
    emergency: bool
    attempts: int
    proposed_at: datetime
    applied_at: datetime | None
    confirmed_at: datetime | None
    failed_at: datetime | None
    compensated_at: datetime | None
    updated_at: datetime
    result: dict[str, Any] | None
    evidence: dict[str, Any] | None
    error: str | None
    claim_expires_at: datetime | None
    claim_remaining: float | None = None  # seconds left on another worker's lease, if any

    @classmethod
    def from_row(cls, row: Row[Any]) -> OperationRecord:
        m = row._mapping
        remaining = m.get("claim_remaining")
        return cls(
            op_id=m["op_id"],
            incident_id=m["incident_id"],
            origin=m["origin"],
            kind=m["kind"],
            target=m["target"],
            intent=m["intent"],
            state=m["state"],
            compensates=m["compensates"],
            dry_run=m["dry_run"],
            emergency=m["emergency"],
            attempts=m["attempts"],
            proposed_at=m["proposed_at"],
            applied_at=m["applied_at"],
            confirmed_at=m["confirmed_at"],
            failed_at=m["failed_at"],
            compensated_at=m["compensated_at"],
            updated_at=m["updated_at"],
            result=m["result"],
            evidence=m["evidence"],
            error=m["error"],
            claim_expires_at=m["claim_expires_at"],
            claim_remaining=None if remaining is None else float(remaining),
        )

    @property
    def claim_live(self) -> bool:
        return self.claim_remaining is not None and self.claim_remaining > 0


@dataclass(frozen=True)
class Claim:
    """The right to apply a proposed operation until the lease expires."""

    op_id: str
    token: str
    attempt: int  # 1 for the first claim; more means an earlier attempt did not record


@dataclass(frozen=True)
class RunOutcome:
    record: OperationRecord
    applied_now: bool  # this call invoked apply and recorded it
    # An earlier attempt's effect was found by confirm() and recorded without re-applying.
    recovered: bool = False
    waited: bool = False  # another worker held a live claim on it when this call arrived

    @property
    def op_id(self) -> str:
        return self.record.op_id

    @property
    def state(self) -> str:
        return self.record.state


class ActionDecision(BaseModel):
    """The ledger's answer to an application proposing an action (the intake returns it as JSON).

    execute: you hold the claim; run the action, then `complete_action` with its result.
    already_executed: it ran before; `result` is what it returned. Do not run it again.
    in_progress: another caller holds the claim; ask again after `retry_after` seconds.
    failed: it was recorded as failed (`error`); it will not be run under this op id.
    """

    op_id: str
    decision: Literal["execute", "already_executed", "in_progress", "failed"]
    claim_token: str | None = None
    attempt: int = 0
    result: dict[str, Any] | None = None
    retry_after: float | None = None
    error: str | None = None


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Ledger:
    """The ledger over one SQLAlchemy engine (postgresql+psycopg). Thread-safe.

    `lease`: seconds a claim stays exclusive; choose it above the slowest apply. `wait`:
    how long `run_once` waits for another worker's live claim before raising
    OperationInProgress (a temporary error: retry later).
    """

    def __init__(self, engine: Engine, *, lease: float = 60.0, wait: float = 30.0) -> None:
        if engine.dialect.name != "postgresql":
            raise ValueError(f"the ledger is PostgreSQL only, not {engine.dialect.name}")
        self.engine = engine
        # Every ledger write is one statement, atomic by itself: autocommit saves the
        # BEGIN and COMMIT round trips (the engine given stays as it was for others).
        self._db = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.lease = lease
        self.wait = wait
        self._owns_engine = False

    @classmethod
    def connect(cls, database_url: str, *, pool_size: int = 8, **options: Any) -> Ledger:
        """A ledger with its own engine (closed by `close()`)."""
        # No pre-ping: it would add a round trip to each of run_once's four. A connection
        # the server dropped fails one call (a temporary error the activity retries) and
        # SQLAlchemy then discards the pool's stale connections; recycling bounds their age.
        engine = create_engine(
            database_url, pool_size=pool_size, max_overflow=pool_size, pool_recycle=1800
        )
        ledger = cls(engine, **options)
        ledger._owns_engine = True
        return ledger

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()

    # ----------------------------------------------------------------- incidents

    def open_incident(
        self,
        incident_id: str,
        *,
        summary: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        """Record an incident (idempotent; a later summary or attributes update it)."""
        values: dict[str, Any] = {"incident_id": incident_id}
        updates: dict[str, Any] = {}
        if summary is not None:
            values["summary"] = updates["summary"] = summary
        if attributes is not None:
            values["attributes"] = updates["attributes"] = json_safe(attributes)
        stmt = pg_insert(incidents).values(values)
        stmt = (
            stmt.on_conflict_do_update(index_elements=["incident_id"], set_=updates)
            if updates
            else stmt.on_conflict_do_nothing(index_elements=["incident_id"])
        )
        with self._db.connect() as conn:
            conn.execute(stmt)

    def close_incident(self, incident_id: str) -> None:
        with self._db.connect() as conn:
            conn.execute(
                update(incidents)
                .where(incidents.c.incident_id == incident_id, incidents.c.closed_at.is_(None))
                .values(closed_at=func.now())
            )

    # ------------------------------------------------------------- primitives

    def get(self, op_id: str) -> OperationRecord | None:
        with self._db.connect() as conn:
            return self._select(conn, op_id)

    def operations(self, incident_id: str) -> list[OperationRecord]:
        """The incident's operations in the order they were proposed."""
        stmt = (
            select(operations, _CLAIM_REMAINING)
            .where(_o.incident_id == incident_id)
            .order_by(_o.proposed_at, _o.op_id)
        )
        with self._db.connect() as conn:
            return [OperationRecord.from_row(row) for row in conn.execute(stmt)]

    def operations_since(self, since: datetime | None) -> list[OperationRecord]:
        """Every operation proposed since `since` (all when None), in proposal order."""
        stmt = select(operations, _CLAIM_REMAINING).order_by(_o.proposed_at, _o.op_id)
        if since is not None:
            stmt = stmt.where(_o.proposed_at >= since)
        with self.engine.connect() as conn:
            return [OperationRecord.from_row(row) for row in conn.execute(stmt)]

    def propose(self, spec: OperationSpec | Mapping[str, Any]) -> OperationRecord:
        """Record the proposal (idempotent). Refuses a bad spec, writing nothing."""
        valid = validate_spec(OperationSpec, spec)
        got = self._propose(_effect_values(valid), claim=False)
        assert isinstance(got, OperationRecord)
        return got

    def claim(self, op_id: str) -> Claim | None:
        """Claim a proposed operation for `lease` seconds; None if it is not claimable now."""
        with self._db.connect() as conn:
            return self._claim(conn, op_id)

    def release(self, op_id: str, claim_token: str, *, error: str | None = None) -> None:
        """Give a claim back without applying (so the next attempt need not wait the lease)."""
        with self._db.connect() as conn:
            conn.execute(_RELEASE, {"p_op_id": op_id, "p_token": claim_token, "p_error": error})

    def mark_applied(self, op_id: str, result: Mapping[str, Any] | None = None) -> OperationRecord:
        """proposed -> applied, with what apply observed. Idempotent: first record wins."""
        params = {"p_op_id": op_id, "p_result": json_safe(result)}
        return self._transition(_MARK_APPLIED, params, "applied", done=("applied", "confirmed"))

    def confirm(
        self,
        op_id: str,
        evidence: Mapping[str, Any],
        *,
        result: Mapping[str, Any] | None = None,
    ) -> OperationRecord:
        """proposed|applied -> confirmed, with the observed evidence. Idempotent.

        Confirming a `proposed` operation records it as applied too: the evidence shows an
        effect whose applied record was lost (the applied-not-recorded window).
        """
        params = {
            "p_op_id": op_id,
            "p_evidence": json_safe(evidence),
            "p_result": None if result is None else json_safe(result),
        }
        return self._transition(_CONFIRM, params, "confirmed", done=("confirmed",))

    def fail(self, op_id: str, error: str) -> OperationRecord:
        """proposed|applied -> failed. The op id is never applied again."""
        params = {"p_op_id": op_id, "p_error": error}
        return self._transition(_FAIL, params, "failed", done=("failed",))

    def compensate(self, op_id: str, *, by: str) -> OperationRecord:
        """Mark `op_id` compensated by operation `by`, which must name it in `compensates`.

        `run_once` does this by itself when a compensating operation is applied.
        """
        with self._db.connect() as conn:
            undoing = self._select(conn, by)
            if undoing is None:
                raise UnknownOperation(by, field="by")
            if undoing.compensates != op_id:
                raise InvalidOperationSpec(
                    "compensates", f"op {by!r} compensates {undoing.compensates!r}, not {op_id!r}"
                )
            self._mark_compensated(conn, op_id)
            record = self._select(conn, op_id)
        assert record is not None  # the foreign key guarantees it
        return record

    # ---------------------------------------------------------------- run once

    def run_once(
        self,
        spec: OperationSpec | Mapping[str, Any],
        apply: Apply,
        confirm: Confirm | None = None,
        *,
        wait: float | None = None,
        on_wait: Callable[[], None] | None = None,
    ) -> RunOutcome:
        """Apply the operation at most once across all workers and retries.

        `apply(op_id)` performs the effect idempotently (stamping the op id) and returns the
        observed result. `confirm(op_id)` returns evidence once the effect is visible, else
        None. `on_wait` is called while waiting on another worker's claim (heartbeats).
        Raises InvalidOperationSpec (nothing written), OperationConflict, OperationFailed,
        OperationInProgress (temporary), or what `apply` raised.
        """
        valid = validate_spec(OperationSpec, spec)
        values = _effect_values(valid)
        # A retry usually finds the operation settled: one read, no write transaction.
        known = self.get(valid.op_id)
        got: OperationRecord | Claim
        if known is not None and (known.state != "proposed" or known.claim_live):
            _check_same(known, values)
            got = known
        else:
            got = self._propose(values, claim=not valid.dry_run)
        waited = isinstance(got, OperationRecord) and got.state == "proposed" and not got.dry_run
        if isinstance(got, OperationRecord):
            got = self._wait_for_claim(got, wait, on_wait)
        if isinstance(got, OperationRecord):
            record = got
            if record.state == "applied" and confirm is not None:
                record = self._confirm_with(record, confirm)
            return RunOutcome(record, applied_now=False, waited=waited)
        return replace(self._apply_claimed(got, apply, confirm), waited=waited)

    def _wait_for_claim(
        self,
        record: OperationRecord,
        wait: float | None,
        on_wait: Callable[[], None] | None,
    ) -> OperationRecord | Claim:
        """Until the operation is settled (its record) or ours to apply (a claim)."""
        deadline = time.monotonic() + (self.wait if wait is None else wait)
        delay = 0.005
        while True:
            if record.state == "failed":
                raise OperationFailed(record.op_id, record.error)
            if record.state != "proposed" or record.dry_run:
                return record
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OperationInProgress(record.op_id, retry_after=record.claim_remaining or 0)
            if on_wait is not None:
                on_wait()
            time.sleep(min(delay, remaining, max(record.claim_remaining or 0, 0.001)))
            delay = min(delay * 1.5, 0.1)
            with self._db.connect() as conn:
                current = self._select(conn, record.op_id)
                assert current is not None  # operations are never deleted
                record = current
                if record.state == "proposed" and not record.claim_live and not record.dry_run:
                    claim = self._claim(conn, record.op_id)
                    if claim is not None:
                        return claim

    def renew(self, op_id: str, claim_token: str) -> bool:
        """Extend a claim this caller still holds by `lease` seconds; False if it lost it."""
        params = {
            "p_op_id": op_id,
            "p_token": claim_token,
            "p_lease": timedelta(seconds=self.lease),
        }
        with self._db.connect() as conn:
            return bool(conn.execute(_RENEW, params).rowcount)

    @contextlib.contextmanager
    def _kept(self, claim: Claim) -> Iterator[None]:
        """Renew the claim every third of the lease until the block ends."""
        done = threading.Event()

        def renew() -> None:
            while not done.wait(self.lease / 3):
                # A failed renewal is not fatal: the lease runs out, another worker takes
                # over, and apply's op-id stamp keeps the effect single.
                with contextlib.suppress(Exception):
                    if not self.renew(claim.op_id, claim.token):
                        return

        keeper = threading.Thread(target=renew, name=f"lease {claim.op_id}", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            done.set()

    def _apply_claimed(self, claim: Claim, apply: Apply, confirm: Confirm | None) -> RunOutcome:
        with self._kept(claim):
            return self._apply_kept(claim, apply, confirm)

    def _apply_kept(self, claim: Claim, apply: Apply, confirm: Confirm | None) -> RunOutcome:
        op_id = claim.op_id
        try:
            if claim.attempt > 1 and confirm is not None:
                # An earlier attempt claimed it and never recorded: its effect may be there.
                evidence = confirm(op_id)
                if evidence is not None:
                    record = self.confirm(op_id, evidence)
                    return RunOutcome(record, applied_now=False, recovered=True)
            result = apply(op_id)
        except PermanentEffectError as exc:
            self.fail(op_id, f"{type(exc).__name__}: {exc}")
            raise
        except BaseException as exc:
            self.release(op_id, claim.token, error=f"attempt {claim.attempt}: {exc!r}"[:2000])
            raise
        record = self.mark_applied(op_id, result)
        if confirm is not None and record.state == "applied":
            record = self._confirm_with(record, confirm)
        return RunOutcome(record, applied_now=True)

    def _confirm_with(self, record: OperationRecord, confirm: Confirm) -> OperationRecord:
        evidence = confirm(record.op_id)
        return record if evidence is None else self.confirm(record.op_id, evidence)

    # ---------------------------------------------------- action boundary

    def propose_action(self, spec: ActionSpec | Mapping[str, Any]) -> ActionDecision:
        """An application asks whether to execute an action: "execute" or "already executed".

        HTTP mapping (the intake): POST /actions with the ActionSpec as JSON -> 200 with this
        decision; `in_progress` -> 409 with Retry-After; a bad spec -> 422 naming the field.
        """
        valid = validate_spec(ActionSpec, spec)
        got = self._propose(_action_values(valid), claim=True)
        if isinstance(got, Claim):
            return ActionDecision(
                op_id=got.op_id, decision="execute", claim_token=got.token, attempt=got.attempt
            )
        return _decision(got)

    def complete_action(
        self, op_id: str, result: Mapping[str, Any] | None = None
    ) -> OperationRecord:
        """The application executed the action: record its result (applied and confirmed).

        Idempotent: a second completion keeps the first result.
        """
        return self.confirm(op_id, json_safe(result), result=json_safe(result))

    def abandon_action(
        self, op_id: str, *, claim_token: str, error: str, permanent: bool = False
    ) -> OperationRecord:
        """The action did not run: release the claim for a retry, or fail it for good."""
        if permanent:
            return self.fail(op_id, error)
        self.release(op_id, claim_token, error=error)
        record = self.get(op_id)
        if record is None:
            raise UnknownOperation(op_id)
        return record

    def run_action(
        self, spec: ActionSpec | Mapping[str, Any], execute: Apply, *, wait: float | None = None
    ) -> RunOutcome:
        """In-process form of the action boundary: execute once, else return the earlier result."""
        valid = validate_spec(ActionSpec, spec)
        got = self._propose(_action_values(valid), claim=True)
        if isinstance(got, OperationRecord):
            got = self._wait_for_claim(got, wait, None)
        if isinstance(got, OperationRecord):
            return RunOutcome(got, applied_now=False)
        claim = got
        try:
            result = execute(claim.op_id)
        except PermanentEffectError as exc:
            self.fail(claim.op_id, f"{type(exc).__name__}: {exc}")
            raise
        except BaseException as exc:
            self.release(claim.op_id, claim.token, error=repr(exc)[:2000])
            raise
        return RunOutcome(self.complete_action(claim.op_id, result), applied_now=True)

    # --------------------------------------------------------------- internals

    def _propose(self, values: dict[str, Any], *, claim: bool) -> OperationRecord | Claim:
        """Record the proposal; with `claim`, claim it too. The claim, else the record."""
        op_id = values["op_id"]
        with self._db.connect() as conn:
            # Checked first so that a refused spec writes nothing, not even its incident.
            undone = values["compensates"]
            if undone is not None and self._select(conn, undone) is None:
                raise InvalidOperationSpec(
                    "compensates",
                    f"no operation {undone!r} in the ledger to compensate",
                    op_id=op_id,
                )
            params = {
                **values,
                "intent": json.dumps(values["intent"]),
                "claim": claim and not values["dry_run"],
                "token": uuid.uuid4().hex,
                "lease": self.lease,
            }
            row = conn.execute(_PROPOSE, params).first()
            if row is not None:
                if params["claim"]:
                    return Claim(op_id=row[0], token=row[1], attempt=row[2])
                record = self._select(conn, op_id)
                assert record is not None
                return record
            existing = self._select(conn, op_id)
            assert existing is not None  # the conflict was on this very row
            _check_same(existing, values)
            if claim and existing.state == "proposed" and not existing.claim_live:
                got = self._claim(conn, op_id)
                if got is not None:
                    return got
                existing = self._select(conn, op_id) or existing
            return existing

    def _claim(self, conn: Connection, op_id: str) -> Claim | None:
        params = {
            "p_op_id": op_id,
            "p_token": uuid.uuid4().hex,
            "p_lease": timedelta(seconds=self.lease),
        }
        row = conn.execute(_CLAIM, params).first()
        return None if row is None else Claim(op_id=row[0], token=row[1], attempt=row[2])

    @staticmethod
    def _select(conn: Connection, op_id: str) -> OperationRecord | None:
        row = conn.execute(_SELECT, {"p_op_id": op_id}).first()
        return None if row is None else OperationRecord.from_row(row)

    def _transition(
        self, stmt: Any, params: dict[str, Any], wanted: str, *, done: tuple[str, ...]
    ) -> OperationRecord:
        op_id = params["p_op_id"]
        with self._db.connect() as conn:
            row = conn.execute(stmt, params).first()
            if row is not None:
                return OperationRecord.from_row(row)
            current = self._select(conn, op_id)
        if current is None:
            raise UnknownOperation(op_id)
        if current.state in done:
            return current
        raise InvalidTransition(op_id, current.state, wanted)

    @staticmethod
    def _mark_compensated(conn: Connection, op_id: str) -> None:
        conn.execute(_MARK_COMPENSATED, {"p_op_id": op_id})


def _effect_values(spec: OperationSpec) -> dict[str, Any]:
    return {
        "op_id": spec.op_id,
        "incident_id": spec.incident_id,
        "origin": "effect",
        "kind": spec.kind,
        "target": spec.target,
        "intent": _normal_json(spec.intent),
        "compensates": spec.compensates,
        "dry_run": spec.dry_run,
        "emergency": spec.emergency,
    }


def _action_values(spec: ActionSpec) -> dict[str, Any]:
    return {
        "op_id": spec.op_id,
        "incident_id": spec.incident_id,
        "origin": "action",
        "kind": spec.kind,
        "target": spec.target,
        "intent": _normal_json(spec.intent),
        "compensates": None,
        "dry_run": False,
        "emergency": False,
    }


def _normal_json(value: dict[str, Any]) -> dict[str, Any]:
    # The form JSONB gives back (tuples become lists), so a re-proposal compares equal.
    loaded: dict[str, Any] = json.loads(json.dumps(value))
    return loaded


_COMPARED = ("incident_id", "origin", "kind", "target", "intent", "compensates", "dry_run")


def _check_same(existing: OperationRecord, values: Mapping[str, Any]) -> None:
    for field in _COMPARED:
        recorded = getattr(existing, field)
        if recorded != values[field]:
            raise OperationConflict(existing.op_id, field, recorded, values[field])


def _decision(record: OperationRecord) -> ActionDecision:
    if record.state in ("applied", "confirmed", "compensated"):
        return ActionDecision(
            op_id=record.op_id,
            decision="already_executed",
            attempt=record.attempts,
            result=record.result,
        )
    if record.state == "failed":
        return ActionDecision(
            op_id=record.op_id, decision="failed", attempt=record.attempts, error=record.error
        )
    return ActionDecision(
        op_id=record.op_id,
        decision="in_progress",
        attempt=record.attempts,
        retry_after=max(record.claim_remaining or 0.0, 0.0),
    )


__all__ = [
    "ActionDecision",
    "ActionSpec",
    "Apply",
    "Claim",
    "Confirm",
    "Ledger",
    "OperationRecord",
    "OperationSpec",
    "RunOutcome",
    "default_owner",
]
