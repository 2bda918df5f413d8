"""The incident runs the runbook in its order, one incident per pool."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from tests.workflows.harness import (
    loss_of,
    new_fleet,
    report_loss,
    running_worker,
    status_of,
    wait_for_gate,
)
from workflows.types import SIGNAL_ALERT_RESOLVED, AlertResolved, incident_workflow_id


async def test_a_lost_replica_is_derouted_replaced_by_a_warm_spare_and_shedding_rolled_back(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    fleet.kill(f"{fleet.pool}-3")
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, f"{fleet.pool}-3"))
        result = await handle.result()
        status = await status_of(handle)
    assert result.outcome == "recovered"
    assert result.steps == [
        "assess",
        "deroute",
        "protect",
        "inflight",
        "hold-replacements",
        "promote-warm",
        "rebuild-warm-floor",
        "reschedule",
        "triage",
        "ramp",
        "verify",
        "roll-back",
    ]
    assert fleet.pods[f"{fleet.pool}-3"].routed is False
    assert fleet.pods[f"{fleet.pool}-warm-0"].routed is True
    # The spare that was promoted is replaced: scaling rebuilds the warm floor.
    assert fleet.warm_replicas == 2
    assert fleet.shed_tier == 0
    assert all(count == 1 for count in fleet.applied.values())
    assert status.step == "closed"
    # Nothing waits on a measuring window before the dead endpoint is out; the blast
    # radius is still decided in capacity (one of eight: 12.5%).
    called = [name for name, _ in fleet.calls]
    assert "read_replica_rates" not in called[: called.index("deroute_replica")]
    decision = next(e for e in status.timeline if e.step == "blast-radius")
    assert decision.evidence["capacity_out_after"] == 0.125
    measured = [e for e in status.timeline if "capacity_measured_after_deroute" in e.evidence]
    assert [e.step for e in measured] == ["deroute"]


async def test_losses_of_one_pool_join_one_incident_repeats_are_ignored_and_a_resolved_alert_is_only_recorded(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=0)
    first, second = f"{fleet.pool}-1", f"{fleet.pool}-6"
    fleet.kill(first)
    fleet.kill(second)
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, first))
        await wait_for_gate(handle, "provision")
        # Alertmanager resends the first alert, and the second replica's alert arrives.
        again = await report_loss(client, task_queue, fleet, loss_of(fleet, first))
        joined = await report_loss(client, task_queue, fleet, loss_of(fleet, second))
        await handle.signal(
            SIGNAL_ALERT_RESOLVED,
            AlertResolved(
                namespace=fleet.namespace, pool=fleet.pool, pod=first, fingerprint=f"fp-{first}"
            ),
        )
        await handle.result()
        status = await status_of(handle)
        description = await handle.describe()
    assert again.result_run_id == joined.result_run_id == handle.result_run_id
    assert status.losses == [first, second]
    assert [e.step for e in status.timeline].count("loss-joined") == 1
    assert [e.outcome for e in status.timeline if e.step == "alert-resolved"] == [
        "recorded; recovery continues until verified"
    ]
    assert fleet.pods[first].routed is False and fleet.pods[second].routed is False
    attributes = {key.name: value for key, value in description.typed_search_attributes}
    assert attributes["IncidentNamespace"] == fleet.namespace
    assert attributes["IncidentPool"] == fleet.pool
    assert attributes["IncidentId"] == status.incident_id
    # Re-assessed when the second loss joined: 2 of 8 is an outage in the fake's table.
    assert attributes["IncidentSeverity"] == "outage"
    assert attributes["IncidentStep"] == "closed"


async def test_operation_ids_name_the_workflow_the_step_and_the_target_never_the_run(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    dead = f"{fleet.pool}-2"
    fleet.kill(dead)
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, dead))
        result = await handle.result()
        run_id = handle.result_run_id
    wid = incident_workflow_id(fleet.namespace, fleet.pool)
    assert run_id is not None
    mutating = [op for _, op in fleet.calls if op is not None]
    assert mutating and all(op.startswith(f"{result.incident_id}/") for op in mutating)
    assert result.incident_id.startswith(f"{wid}@")
    assert all(run_id not in op for op in mutating)
    assert f"{result.incident_id}/deroute/{dead}" in mutating


async def test_a_replica_verified_on_the_wrong_node_pool_is_relocated_in_the_roll_back(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    fleet.kill(f"{fleet.pool}-3")
    # A survivor on the wrong pool was there before the incident: not the incident's to move.
    fleet.misplaced = [f"{fleet.pool}-5", f"{fleet.pool}-replacement-0"]
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, f"{fleet.pool}-3"))
        result = await handle.result()
        status = await status_of(handle)

    assert result.outcome == "recovered"
    relocations = [op for name, op in fleet.calls if name == "relocate_misplaced_pod"]
    assert len(relocations) == 1
    assert relocations[0].endswith(f"/{fleet.pool}-replacement-0/relocate")
    assert fleet.misplaced == [f"{fleet.pool}-5"]
    assert fleet.applied[relocations[0]] == 1
    roll_back = next(e for e in status.timeline if e.step == "roll-back")
    assert roll_back.outcome != "failed"


async def test_a_ramp_outlives_several_infrastructure_faults_instead_of_unwinding_the_recovery(
    ts_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    fleet.kill(f"{fleet.pool}-3")
    # A worker killed, the ledger's database restarted and Temporal restarted, each
    # costing an attempt, and one more for good measure.
    fleet.ramp_faults = 4
    client = ts_env.client
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(client, task_queue, fleet, loss_of(fleet, f"{fleet.pool}-3"))
        result = await handle.result()

    assert result.outcome == "recovered"
    assert [name for name, _ in fleet.calls].count("ramp_traffic") == 5
    assert fleet.ramp_faults == 0
