"""The incident runs the runbook in its order, one incident per pool."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from tests.workflows.harness import loss_of, new_fleet, report_loss, running_worker, status_of


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
        "promote-warm",
        "reschedule",
        "triage",
        "ramp",
        "verify",
        "roll-back",
    ]
    assert fleet.pods[f"{fleet.pool}-3"].routed is False
    assert fleet.pods[f"{fleet.pool}-warm-0"].routed is True
    assert fleet.shed_tier == 0
    assert all(count == 1 for count in fleet.applied.values())
    assert status.step == "closed"
