"""Dry run: every mutating activity records its intent, nothing is applied, reads are real."""

from __future__ import annotations

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.workflows.harness import loss_of, new_fleet, report_loss, running_worker, status_of

MUTATING = {
    "deroute_replica",
    "apply_shed_tier",
    "apply_retry_contract",
    "promote_warm",
    "scale_pool",
    "triage_node",
    "ramp_traffic",
    "notify_incident_channel",
    "restore_shed_tier",
}


@pytest.mark.parametrize("flag", ["start-argument", "alert-label"])
async def test_a_dry_run_applies_nothing_records_every_intent_and_still_reads_the_fleet(
    ts_env: WorkflowEnvironment, task_queue: str, flag: str
) -> None:
    fleet = new_fleet(serving=8, warm=1)
    dead = f"{fleet.pool}-4"
    fleet.kill(dead)
    fleet.wanted_tier = 4
    before = fleet.snapshot()
    client = ts_env.client
    by_label = flag == "alert-label"
    async with running_worker(client, task_queue, fleet):
        handle = await report_loss(
            client,
            task_queue,
            fleet,
            loss_of(fleet, dead, dry_run=by_label),
            dry_run=not by_label,
        )
        await handle.result()
        status = await status_of(handle)
    assert fleet.snapshot() == before
    assert not fleet.applied
    assert fleet.messages == []
    assert {name for name, _ in fleet.intents} == MUTATING
    called = {name for name, _ in fleet.calls}
    assert {"assess_loss", "read_routing_state", "read_pressure", "read_replica_rates"} <= called
    assert status.dry_run
    assert all(e.dry_run for e in status.effects)
    would = [e for e in status.timeline if e.outcome == "would apply (dry run)"]
    assert {e.evidence["op_id"] for e in would} == {e.op_id for e in status.effects}
    assert next(e for e in would if e.step == "deroute").evidence["intent"]["pod"] == dead
    steps = [
        e for e in status.timeline if e.step in ("assess", "protect", "verify") and e not in would
    ]
    assert [e.outcome for e in steps] == ["would have acted (dry run)"] * 3
    # The gate a live run would have waited on is shown with its question, not waited on.
    assert [e.outcome for e in status.timeline if e.step == "gate"] == ["shed-tier/D4: dry-run"]
