"""run_once: what is applied, what is recorded, and what a retry does."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import Engine

from activities.effects import EffectRunner, OperationSpec
from ledger.errors import (
    InvalidTransition,
    OperationConflict,
    OperationFailed,
    OperationInProgress,
    PermanentEffectError,
)
from ledger.store import Ledger, OperationRecord

INCIDENT = "replica-loss/serving/pool-a"


def spec(step: str = "deroute", target: str = "serving/pod/llm-0", **extra: Any) -> OperationSpec:
    return OperationSpec(
        op_id=f"{INCIDENT}/{step}/{target}",
        incident_id=INCIDENT,
        kind=extra.pop("kind", "label-pod"),
        target=target,
        intent=extra.pop("intent", {"labels": {"serving": "false"}}),
        **extra,
    )


class World:
    """Effects counted by the test itself."""

    def __init__(self) -> None:
        self.applied: list[str] = []
        self.visible: set[str] = set()

    def apply(self, op_id: str) -> dict[str, Any]:
        self.applied.append(op_id)
        self.visible.add(op_id)
        return {"patched": op_id}

    def confirm(self, op_id: str) -> dict[str, Any] | None:
        return {"seen": op_id} if op_id in self.visible else None


@pytest.fixture
def ledger(db_engine: Engine) -> Ledger:
    return Ledger(db_engine, lease=30, wait=5)


def test_first_run_applies_and_records_each_transition_with_its_time(ledger: Ledger) -> None:
    world = World()

    outcome = ledger.run_once(spec(), world.apply, world.confirm)

    record = outcome.record
    assert world.applied == [record.op_id]
    assert outcome.applied_now
    assert (record.state, record.attempts) == ("confirmed", 1)
    assert record.result == {"patched": record.op_id}
    assert record.evidence == {"seen": record.op_id}
    assert record.applied_at is not None and record.confirmed_at is not None
    assert record.proposed_at <= record.applied_at <= record.confirmed_at
    assert record.intent == {"labels": {"serving": "false"}}


def test_a_retry_of_an_applied_operation_returns_the_recorded_result_without_applying(
    ledger: Ledger,
) -> None:
    world = World()
    first = ledger.run_once(spec(), world.apply, world.confirm)

    again = ledger.run_once(spec(), world.apply, world.confirm)

    assert world.applied == [first.op_id]
    assert not again.applied_now
    assert again.record.result == first.record.result
    assert again.record.confirmed_at == first.record.confirmed_at


def test_an_effect_not_yet_visible_stays_applied_and_a_retry_confirms_it_without_applying(
    ledger: Ledger,
) -> None:
    world = World()
    late = World()  # confirm sees nothing the first time
    first = ledger.run_once(spec(), world.apply, late.confirm)
    assert first.state == "applied"

    again = ledger.run_once(spec(), world.apply, world.confirm)

    assert world.applied == [first.op_id]
    assert (again.state, again.applied_now) == ("confirmed", False)


def test_an_apply_that_raises_releases_the_claim_and_the_next_attempt_applies_at_once(
    ledger: Ledger,
) -> None:
    world = World()

    def flaky(op_id: str) -> dict[str, Any]:
        raise TimeoutError("API server did not answer")

    with pytest.raises(TimeoutError):
        ledger.run_once(spec(), flaky)
    record = ledger.get(spec().op_id)
    assert record is not None
    assert (record.state, record.attempts, record.claim_remaining) == ("proposed", 1, None)
    assert record.error is not None and "API server did not answer" in record.error

    outcome = ledger.run_once(spec(), world.apply, wait=0)

    assert (outcome.state, outcome.record.attempts) == ("applied", 2)
    assert world.applied == [spec().op_id]


def test_a_permanent_effect_error_fails_the_operation_and_it_is_never_applied_again(
    ledger: Ledger,
) -> None:
    world = World()

    def refused(op_id: str) -> dict[str, Any]:
        raise PermanentEffectError("422: label selector is immutable")

    with pytest.raises(PermanentEffectError):
        ledger.run_once(spec(), refused)
    with pytest.raises(OperationFailed, match="selector is immutable"):
        ledger.run_once(spec(), world.apply)

    assert world.applied == []
    record = ledger.get(spec().op_id)
    assert record is not None and record.state == "failed" and record.failed_at is not None


def test_a_live_claim_held_by_another_worker_makes_a_retry_wait_then_report_in_progress(
    ledger: Ledger,
) -> None:
    world = World()
    ledger.propose(spec())
    other = ledger.claim(spec().op_id)
    assert other is not None and other.attempt == 1
    waits: list[int] = []

    with pytest.raises(OperationInProgress) as raised:
        ledger.run_once(spec(), world.apply, wait=0.2, on_wait=lambda: waits.append(1))

    assert world.applied == []
    assert waits, "the waiting call heartbeats"
    assert not raised.value.permanent
    assert 25 < raised.value.retry_after <= 30


def test_a_claim_whose_lease_expired_is_taken_over_and_applied(db_engine: Engine) -> None:
    short = Ledger(db_engine, lease=0.2, wait=5)
    world = World()
    short.propose(spec())
    assert short.claim(spec().op_id) is not None  # a worker that then went silent

    outcome = short.run_once(spec(), world.apply)

    assert outcome.waited and outcome.applied_now
    assert (outcome.state, outcome.record.attempts) == ("applied", 2)
    assert world.applied == [spec().op_id]


def test_an_apply_that_outlasts_the_lease_keeps_its_claim_renewed(db_engine: Engine) -> None:
    short = Ledger(db_engine, lease=1.0, wait=0.05)
    world = World()
    seen: list[OperationRecord | None] = []

    def slow_apply(op_id: str) -> dict[str, Any]:
        time.sleep(2.5)  # longer than the lease: only renewal keeps the claim live
        seen.append(short.get(op_id))
        with pytest.raises(OperationInProgress):
            short.run_once(spec(), world.apply)  # a second worker arriving now waits
        return world.apply(op_id)

    outcome = short.run_once(spec(), slow_apply)

    assert seen[0] is not None and seen[0].claim_live
    assert outcome.applied_now and world.applied == [spec().op_id]
    assert short.get(spec().op_id).claim_expires_at is None  # type: ignore[union-attr]


def test_reusing_an_op_id_for_another_target_is_refused_as_a_conflict(ledger: Ledger) -> None:
    world = World()
    ledger.run_once(spec(), world.apply)
    other = spec().model_copy(update={"target": "serving/pod/llm-1"})

    with pytest.raises(OperationConflict) as raised:
        ledger.run_once(other, world.apply)

    assert raised.value.field == "target"
    assert world.applied == [spec().op_id]


def test_a_dry_run_records_the_intent_and_applies_nothing(ledger: Ledger) -> None:
    world = World()

    outcome = ledger.run_once(spec(dry_run=True), world.apply, world.confirm)

    assert world.applied == []
    assert (outcome.state, outcome.applied_now, outcome.record.dry_run) == ("proposed", False, True)
    assert outcome.record.intent == {"labels": {"serving": "false"}}


def test_applying_a_compensation_marks_the_operation_it_undoes_compensated(
    ledger: Ledger,
) -> None:
    world = World()
    cordon = spec("cordon", "node/gpu-3", kind="cordon-node", intent={"unschedulable": True})
    ledger.run_once(cordon, world.apply, world.confirm)
    uncordon = spec(
        "uncordon",
        "node/gpu-3",
        kind="uncordon-node",
        intent={"unschedulable": False},
        compensates=cordon.op_id,
    )

    undo = ledger.run_once(uncordon, world.apply, world.confirm)

    undone = ledger.get(cordon.op_id)
    assert undone is not None
    assert (undone.state, undo.state, undo.record.compensates) == (
        "compensated",
        "confirmed",
        cordon.op_id,
    )
    assert undone.compensated_at is not None
    # A late retry of the compensated operation must not put the effect back.
    late = ledger.run_once(cordon, world.apply)
    assert not late.applied_now and late.state == "compensated"
    assert world.applied == [cordon.op_id, uncordon.op_id]


def test_a_failed_operation_cannot_be_confirmed(ledger: Ledger) -> None:
    ledger.propose(spec())
    ledger.fail(spec().op_id, "node deleted under us")

    with pytest.raises(InvalidTransition, match="is failed; it cannot become confirmed"):
        ledger.confirm(spec().op_id, {"seen": True})


def test_the_effect_runner_reports_state_and_observed_result(ledger: Ledger) -> None:
    world = World()
    runner = EffectRunner(ledger, confirm_attempts=3, confirm_interval=0.01)
    visible_on_third_look = iter([None, None, {"ready": False}])

    first = runner.run(spec(), world.apply, lambda op_id: next(visible_on_third_look))
    second = runner.run(spec(), world.apply)

    assert (first.state, first.applied_now, first.result) == ("confirmed", True, {"ready": False})
    assert (second.state, second.applied_now, second.attempts) == ("confirmed", False, 1)
    assert world.applied == [spec().op_id]


def test_the_incident_lists_its_operations_in_proposal_order(ledger: Ledger) -> None:
    world = World()
    for n in range(3):
        ledger.run_once(spec(target=f"serving/pod/llm-{n}"), world.apply)

    listed = ledger.operations(INCIDENT)

    assert [r.target for r in listed] == [f"serving/pod/llm-{n}" for n in range(3)]
