"""Shared vocabulary of the activity modules: options, mutating inputs, pod references.

Called from every module in `activities/` and, for the option constants and models only,
from `workflows/replica_loss.py`. Nothing here touches the outside world.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, Field, ValidationError
from temporalio import activity
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ActivityConfig, LocalActivityConfig

from activities.errors import NON_RETRYABLE_TYPES, PermanentError, TemporaryError, policy_backoff
from ledger.errors import InvalidOperationSpec, LedgerError, PermanentEffectError
from ledger.spec import OperationSpec

# Heartbeat timeout of every activity that changes something: how long Temporal waits before
# it gives up on a dead worker and retries the step elsewhere. Longer than one Kubernetes or
# HTTP call's own timeout (10 s), so a slow call is not mistaken for a dead worker; the
# ledger's lease (FLEETMEND_LEDGER_LEASE_S) is of the same order, so the retry finds the
# dead worker's claim expired instead of waiting for it.
MUTATING_HEARTBEAT_S = 15.0

# Heartbeat timeout of a read that samples for a while (metrics windows): it heartbeats
# before each scrape and through its waits, and one scrape's own timeout is 10 s.
READ_HEARTBEAT_S = 15.0
# Start-to-close timeout of a read that does not heartbeat: a few Kubernetes calls, each
# bounded by its own 10 s timeout (a hung call fails the attempt before this runs out).
# Without a heartbeat, Temporal notices a dead worker only when this runs out, so it is no
# longer than a heartbeating step's MUTATING_HEARTBEAT_S: a crash costs a read no more.
READ_START_TO_CLOSE_S = 15.0
# The longest an activity without a heartbeat timeout may be given
# (tests/activities/test_errors_and_options.py holds every activity to it).
UNHEARTBEATED_MAX_S = 30.0


def activity_options(
    *,
    start_to_close: float,
    heartbeat: float | None = None,
    schedule_to_close: float | None = None,
    max_attempts: int = 0,
    initial_interval: float = 1.0,
    maximum_interval: float = 30.0,
) -> ActivityConfig:
    """Timeouts and retry policy for one activity, as `workflow.execute_activity(**opts)` takes.

    Each activity module defines its constants with this, next to the activity, so the
    workflow cannot call an activity without the timeouts its author chose.
    """
    config = ActivityConfig(
        start_to_close_timeout=timedelta(seconds=start_to_close),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=initial_interval),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=maximum_interval),
            maximum_attempts=max_attempts,
            non_retryable_error_types=list(NON_RETRYABLE_TYPES),
        ),
    )
    if heartbeat is not None:
        config["heartbeat_timeout"] = timedelta(seconds=heartbeat)
    if schedule_to_close is not None:
        config["schedule_to_close_timeout"] = timedelta(seconds=schedule_to_close)
    return config


def local_options(options: ActivityConfig) -> LocalActivityConfig:
    """The same timeouts and retry policy for `workflow.execute_local_activity`.

    A local activity runs inside the workflow task that schedules it, so a short read
    before the deroute costs no task-queue round trip. It cannot heartbeat: a heartbeat
    timeout in `options` is dropped, the start-to-close timeout bounds it instead.
    """
    config = LocalActivityConfig()
    for key in ("start_to_close_timeout", "schedule_to_close_timeout", "retry_policy"):
        if key in options:
            config[key] = options[key]  # type: ignore[literal-required]
    return config


# A Kubernetes API outage every Kubernetes-facing activity's retry policy must ride out
# (a control-plane restart or an apiserver overload lasts tens of seconds).
API_OUTAGE_S = 60.0


def retry_budget_s(policy: RetryPolicy) -> float:
    """Seconds of back-off between the first attempt and the last (unbounded: infinity)."""
    if policy.maximum_attempts <= 0:
        return float("inf")
    delays = (policy_backoff(n, policy) for n in range(1, policy.maximum_attempts))
    return sum(d.total_seconds() for d in delays)


class MutatingInput(BaseModel):
    """Every activity that changes something carries the workflow's operation id.

    `op_id` is derived in the workflow (never from the run id) so a retried or replayed
    step proposes the same operation and the ledger refuses to apply it twice.
    """

    op_id: str
    incident_id: str
    dry_run: bool = False


def this_attempt() -> int:
    """The Temporal attempt running now (1 outside an activity)."""
    return activity.info().attempt if activity.in_activity() else 1


class MutatingResult(BaseModel):
    """What every mutating activity returns besides its own facts.

    `attempt` is the Temporal attempt that produced the result, filled in where the result
    is built; above 1, earlier attempts failed or their worker died, and the workflow puts
    it in the step's timeline entry so an SRE sees the retry. (A history recorded before
    the field existed decodes with 1.)
    """

    applied_now: bool
    attempt: int = Field(default_factory=this_attempt)


class PodRef(BaseModel):
    """A pod as the activities exchange it: where it runs and where to scrape it."""

    namespace: str
    name: str
    node: str | None = None
    ip: str | None = None
    metrics_url: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class Check(BaseModel):
    """One verification check: the verdict and the numbers it was read from."""

    name: str
    passed: bool
    evidence: dict[str, Any] = Field(default_factory=dict)
    detail: str = ""


def heartbeat(*details: object) -> None:
    """Heartbeat when running as an activity; a no-op when called directly."""
    if activity.in_activity():
        activity.heartbeat(*details)


T = TypeVar("T")


def result_heartbeating(future: Future[T], every_s: float = 1.0) -> T:
    """The future's result, heartbeating while it is not there yet."""
    while True:
        try:
            return future.result(timeout=every_s)
        except TimeoutError:  # concurrent.futures.TimeoutError since 3.11
            heartbeat()


def heartbeating(call: Callable[[], T], every_s: float = 1.0) -> T:
    """Run one blocking call, heartbeating until it returns.

    A single request may legitimately take longer than the heartbeat timeout (a cold
    replica's first token); without this, Temporal would time out a live attempt and run
    a second one beside it. Outside an activity the call runs inline.
    """
    if not activity.in_activity():
        return call()
    with ThreadPoolExecutor(max_workers=1) as pool:
        return result_heartbeating(pool.submit(call), every_s)


def wait(seconds: float, *details: object) -> None:
    """Sleep in short slices, heartbeating, so a cancelled activity notices promptly."""
    deadline = time.monotonic() + max(0.0, seconds)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        heartbeat(*details)
        time.sleep(min(remaining, 0.5))


# ---------------------------------------------------------------------------- the ledger

ApplyFn = Callable[[str], dict[str, Any]]
ConfirmFn = Callable[[str], dict[str, Any] | None]


class EffectRunnerLike(Protocol):
    """What activities need from `activities.effects.EffectRunner`."""

    def run(self, spec: Any, apply: Any, confirm: Any = None) -> Any: ...


# The state of a compensation whose operation never reached the ledger.
NOTHING_TO_UNDO = "nothing-to-undo"


@dataclass(frozen=True)
class EffectOutcome:
    state: str
    applied_now: bool
    result: dict[str, Any]

    @property
    def confirmed(self) -> bool:
        return self.state == "confirmed"


def run_effect(
    runner: EffectRunnerLike,
    op: MutatingInput,
    *,
    kind: str,
    target: str,
    intent: dict[str, Any],
    apply: ApplyFn,
    confirm: ConfirmFn | None = None,
    compensates: str | None = None,
    emergency: bool = False,
    op_id: str | None = None,
) -> EffectOutcome:
    """Run one effect through the ledger under the workflow's operation id.

    `intent` must be a function of the workflow's input only (the ledger refuses the same
    op id with another intent); measured values belong in what `apply` returns. A
    non-retryable error raised by `apply` is recorded as failed in the ledger, so it is
    not left behind as an orphan proposal.
    """
    try:
        spec = OperationSpec(
            op_id=op_id or op.op_id,
            incident_id=op.incident_id,
            kind=kind,
            target=target,
            intent=intent,
            compensates=compensates,
            dry_run=op.dry_run,
            emergency=emergency,
        )
    except ValidationError as exc:
        # A name no Kubernetes object can have: no attempt can succeed, and nothing ran.
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise PermanentError(f"{kind} {target!r}: refused before any effect: {problems}") from None

    def guarded_apply(applied_op_id: str) -> dict[str, Any]:
        try:
            return apply(applied_op_id)
        except ApplicationError as exc:
            if exc.non_retryable:
                raise PermanentEffectError(str(exc)) from exc
            raise

    try:
        outcome = runner.run(spec, guarded_apply, confirm)
    except PermanentEffectError as exc:
        cause = exc.__cause__
        if isinstance(cause, ApplicationError):
            raise cause from None
        raise PermanentError(f"{kind} {target}: {exc}") from exc
    except InvalidOperationSpec as exc:
        if compensates is not None and exc.field == "compensates":
            # The ledger records an intent before its effect is applied, so an operation
            # it never saw never ran: there is nothing to undo, and nothing is written.
            return EffectOutcome(state=NOTHING_TO_UNDO, applied_now=False, result={})
        raise PermanentError(f"{kind} {target}: {exc}") from exc
    except LedgerError as exc:
        if exc.permanent:
            raise PermanentError(f"{kind} {target}: {exc}") from exc
        raise TemporaryError(f"{kind} {target}: {exc}") from exc
    # A confirmed operation reports confirm's evidence; what apply returned (previous
    # values, names touched) is kept in the ledger record, so read both.
    merged: dict[str, Any] = {}
    ledger = getattr(runner, "ledger", None)
    if ledger is not None and hasattr(ledger, "get"):
        record = ledger.get(spec.op_id)
        if record is not None and record.result:
            merged.update(record.result)
    merged.update(getattr(outcome, "result", None) or {})
    return EffectOutcome(
        state=str(outcome.state), applied_now=bool(outcome.applied_now), result=merged
    )
