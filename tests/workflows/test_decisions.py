"""The pure decisions the workflow takes, without Temporal: each one a plain function."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from activities.cluster import DemoteWarmInput, ScaleInput
from workflows import saga
from workflows.approvals import (
    ApprovalRejected,
    close_gate,
    decide_gate,
    gate_timeout_s,
    open_gate,
    validate_approval,
)
from workflows.decisions import (
    check_blast_radius,
    hold_weights,
    next_cooldown,
    probe_passed,
    probe_weight,
    serving_capacity,
)
from workflows.opids import compensation_id, incident_id, operation_id
from workflows.reconcile import find_discrepancies
from workflows.types import ApprovalInput, IncidentState, LedgerOperation, ObservedEffect

NOW = datetime(2026, 11, 29, 8, 31, 5, tzinfo=UTC)
EIGHT = {f"r{i}": 20.0 for i in range(8)}


def test_two_of_eight_equal_replicas_are_within_a_quarter_and_the_third_is_beyond() -> None:
    assert check_blast_radius(EIGHT, ["r0"], "r1", 0.25).allowed
    third = check_blast_radius(EIGHT, ["r0", "r1"], "r2", 0.25)
    assert not third.allowed
    assert third.capacity_out_after == 0.375
    assert "beyond the automatic limit of 25%" in third.reason


def test_blast_radius_counts_serving_capacity_not_replicas() -> None:
    # One replica carries a third of the pool: one of eight by count, 33% by capacity.
    capacity = {**EIGHT, "r0": 70.0}
    decision = check_blast_radius(capacity, [], "r0", 0.25)
    assert not decision.allowed
    assert decision.capacity_out_after == pytest.approx(70 / 210, abs=1e-4)


def test_an_unmeasured_replica_counts_as_the_average_and_nothing_measured_falls_back_to_counts() -> (
    None
):
    assert serving_capacity(["a", "b", "c"], {"a": 10.0, "b": 40.0, "c": None}) == {
        "a": 10.0,
        "b": 40.0,
        "c": 25.0,
    }
    assert serving_capacity(["a", "b"], {}) == {"a": 1.0, "b": 1.0}


def test_one_dead_replica_of_four_is_a_quarter_of_capacity_however_noisy_the_survivors() -> None:
    capacity = serving_capacity(
        ["a", "b", "c", "dead"], {"a": 19.2, "b": 20.9, "c": 21.4, "dead": None}
    )
    decision = check_blast_radius(capacity, [], "dead", 0.25)
    assert decision.allowed
    assert decision.capacity_out_after == pytest.approx(0.25, abs=1e-4)


def test_a_failed_probe_doubles_the_cool_down_up_to_the_bound_and_a_pass_resets_it() -> None:
    steps = [30.0]
    for _ in range(5):
        steps.append(next_cooldown(steps[-1], failed=True, base_s=30.0, max_s=300.0))
    assert steps == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0]
    assert next_cooldown(240.0, failed=False, base_s=30.0, max_s=300.0) == 30.0


@pytest.mark.parametrize(
    ("rate", "ttft", "passed"),
    [
        (5.0, 0.4, True),
        (0.0, 0.4, False),
        (None, 0.4, False),
        (5.0, None, False),
        (5.0, 2.5, False),
    ],
)
def test_a_probe_passes_only_when_the_replica_served_within_the_slo(
    rate: float | None, ttft: float | None, passed: bool
) -> None:
    assert probe_passed(rate, ttft, ttft_slo_s=2.0)[0] is passed


def test_the_probe_share_always_gives_the_replica_some_traffic() -> None:
    assert probe_weight(0.1) == 100
    assert probe_weight(0.0001) == 1


def test_operation_ids_are_deterministic_and_carry_workflow_step_and_target() -> None:
    incident = incident_id("replica-loss/serving/llama", NOW)
    assert incident == "replica-loss/serving/llama@20261129T083105Z"
    op = operation_id(incident, "deroute", "llama-3")
    assert op == operation_id(incident, "deroute", "llama-3")
    assert op == "replica-loss/serving/llama@20261129T083105Z/deroute/llama-3"
    assert compensation_id(op) == f"{op}/compensate"
    with pytest.raises(ValueError):
        operation_id(incident, "", "llama-3")


def state_with_gate() -> IncidentState:
    state = IncidentState()
    open_gate(
        state,
        name="provision",
        kind="provision",
        would_do="scale",
        configured_timeout_s=900,
        now=NOW,
    )
    return state


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (ApprovalInput(gate="provison", approver="alice"), "no gate named 'provison'"),
        (ApprovalInput(gate="provision", approver=" "), "approver's name"),
    ],
)
def test_the_validator_refuses_an_unknown_gate_and_an_anonymous_approval(
    request_: ApprovalInput, message: str
) -> None:
    with pytest.raises(ApprovalRejected, match=message):
        validate_approval(state_with_gate(), request_)


def test_a_decided_gate_cannot_be_decided_again() -> None:
    state = state_with_gate()
    gate = decide_gate(state, ApprovalInput(gate="provision", approver="alice", approve=False), NOW)
    assert gate.outcome == "rejected" and gate.approver == "alice"
    with pytest.raises(ApprovalRejected, match="already decided: rejected by alice"):
        validate_approval(state, ApprovalInput(gate="provision", approver="bob"))


def test_gates_time_out_to_their_default_and_the_shedding_gate_waits_at_most_five_minutes() -> None:
    assert gate_timeout_s("shed-tier", 900) == 300
    assert gate_timeout_s("force-delete", 900) == 900
    state = state_with_gate()
    gate = state.gates["provision"]
    assert gate.deadline == NOW + timedelta(seconds=900)
    assert "nothing is scaled" in gate.on_timeout
    close_gate(gate, "timed-out", NOW)
    close_gate(gate, "aborted", NOW)  # a closed gate keeps its first outcome
    assert gate.outcome == "timed-out"


def test_the_saga_unwinds_newest_first_skipping_what_is_done_or_discharged() -> None:
    state = IncidentState()
    base = {"incident_id": "i", "namespace": "serving"}
    for n, step in enumerate(["protect", "promote-warm", "provision"]):
        saga.register(
            state,
            forward_op_id=f"i/{step}/x",
            step=step,
            target="x",
            undo=ScaleInput(op_id="", name="llama", replicas=n, **base),
        )
    again = saga.register(
        state,
        forward_op_id="i/protect/x",
        step="protect",
        target="x",
        undo=DemoteWarmInput(op_id="", pods=[], **base),
    )
    assert again.activity == "scale_pool"  # registering twice keeps the first undo
    state.saga[1].done = True
    saga.discharge(state, "i/provision/x")
    assert [c.forward_op_id for c in saga.to_unwind(state)] == ["i/protect/x"]
    request, _ = saga.call_of(state.saga[0])
    assert request.model_dump()["op_id"] == "i/protect/x/compensate"


def op(op_id: str, state: str = "confirmed", **kw: object) -> LedgerOperation:
    return LedgerOperation(
        op_id=op_id, incident_id="i", kind="k", target="ns/pod/p", state=state, **kw
    )


def test_reconciliation_finds_duplicates_orphans_and_drift_and_ignores_dry_runs() -> None:
    operations = [
        op("dup"),
        op("orphan", state="proposed"),
        op("shed", emergency=True),
        op("shed-2", emergency=True),
        op("undo", compensates="shed-2"),
        op("dry", state="proposed", dry_run=True),
    ]
    observed = [
        ObservedEffect(op_id="dup", present=True, occurrences=2),
        ObservedEffect(op_id="shed", present=True, occurrences=1),
        ObservedEffect(op_id="shed-2", present=True, occurrences=1),
    ]
    findings = {(f.kind, f.op_id) for f in find_discrepancies(operations, observed)}
    assert findings == {("duplicate", "dup"), ("orphan", "orphan"), ("drift", "shed")}


def test_held_replicas_share_the_probe_share_and_the_warm_ones_the_rest() -> None:
    weights = hold_weights(["a", "b", "c"], ["new"], 0.1)
    assert weights == {"new": 100, "a": 300, "b": 300, "c": 300}
    assert hold_weights(["a"], [], 0.1) == {}
    # Nothing warm left: the held replicas are all there is.
    assert hold_weights([], ["x", "y"], 0.1) == {"x": 500, "y": 500}
