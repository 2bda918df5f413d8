"""Regenerate the recorded histories the replay test runs the Replayer over.

    .venv/bin/python -m tests.histories.record [SCENARIO ...]

Runs every shipped scenario shape of the incident workflow on the time-skipping server
against the fake fleet and writes one JSON history per workflow run to this directory.
Re-record only on purpose: a change that needs new histories is a change that breaks
running incidents, and it needs a `workflow.patched(...)` branch instead.

Naming scenarios records only those and keeps every other history: that is how a new
patched step gets its histories while the old ones keep proving the unpatched branch
still replays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests.workflows.fakes import Fleet, Pod
from tests.workflows.harness import (
    loss_of,
    new_fleet,
    report_loss,
    running_worker,
    status_of,
    wait_for_gate,
)
from worker.stack import temporal_binary
from workflows.reconcile import reconcile_workflow_id
from workflows.types import (
    SEARCH_ATTRIBUTES,
    SIGNAL_ABORT,
    SIGNAL_APPROVE,
    AbortRequest,
    ApprovalInput,
)

HERE = Path(__file__).resolve().parent
INDEX = "workflow_ids.json"

Drive = Callable[[Client, str, Fleet], Awaitable[WorkflowHandle[Any, Any]]]


async def warm_spare_recovery(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    fleet.kill(f"{fleet.pool}-3")
    return await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-3"))


async def provision_approved(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    fleet.kill(f"{fleet.pool}-1")
    handle = await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-1"))
    await wait_for_gate(handle, "provision")
    await handle.signal(SIGNAL_APPROVE, ApprovalInput(gate="provision", approver="alice"))
    return handle


async def three_lost(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    """Three of eight replicas lost together: the third is beyond the blast-radius limit."""
    pods = [f"{fleet.pool}-{i}" for i in (0, 1, 2)]
    for pod in pods:
        fleet.kill(pod)
    handle = await report_loss(client, tq, fleet, loss_of(fleet, pods[0]))
    for pod in pods[1:]:
        await handle.signal("replica_lost", loss_of(fleet, pod))
    return handle


async def gates_time_out(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    fleet.wanted_tier = 4
    fleet.deroute_confirms = False
    return await three_lost(client, tq, fleet)


async def late_loss_and_resolved_alert(
    client: Client, tq: str, fleet: Fleet
) -> WorkflowHandle[Any, Any]:
    first, second = f"{fleet.pool}-1", f"{fleet.pool}-6"
    fleet.kill(first)
    fleet.kill(second)
    handle = await report_loss(client, tq, fleet, loss_of(fleet, first))
    await wait_for_gate(handle, "provision")
    await report_loss(client, tq, fleet, loss_of(fleet, first))
    await report_loss(client, tq, fleet, loss_of(fleet, second))
    return handle


async def failure_compensated(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    fleet.kill(f"{fleet.pool}-2")

    def fail(name: str, request: BaseModel) -> bool:
        return name == "verify_capacity"

    fleet.fail = fail
    return await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-2"))


async def aborted(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    fleet.kill(f"{fleet.pool}-0")
    handle = await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-0"))
    await wait_for_gate(handle, "provision")
    await handle.signal(SIGNAL_ABORT, AbortRequest(requested_by="bob", reason="drill"))
    return handle


async def cancelled(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    fleet.kill(f"{fleet.pool}-0")
    handle = await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-0"))
    await wait_for_gate(handle, "provision")
    await handle.cancel()
    return handle


async def dry_run(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    fleet.kill(f"{fleet.pool}-4")
    fleet.wanted_tier = 4
    return await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-4"), dry_run=True)


async def half_open_retries(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    fleet.kill(f"{fleet.pool}-0")
    fleet.probe_ttft[f"{fleet.pool}-warm-0"] = [3.0, 3.0, 0.4]
    return await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-0"))


async def continue_as_new(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    fleet.kill(f"{fleet.pool}-5")
    return await report_loss(
        client, tq, fleet, loss_of(fleet, f"{fleet.pool}-5"), max_history_events=25
    )


async def warm_floor_rebuilt(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    # Recorded after `rebuild-warm-floor` and `roll-back-every-shed-tier` were patched in.
    fleet.kill(f"{fleet.pool}-2")
    return await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-2"))


async def escalated_shed_tier_rolled_back(
    client: Client, tq: str, fleet: Fleet
) -> WorkflowHandle[Any, Any]:
    # An approved escalation beyond the automatic limit is a second measure to roll back.
    fleet.kill(f"{fleet.pool}-4")
    fleet.wanted_tier = 4
    handle = await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-4"))
    await wait_for_gate(handle, "shed-tier/D4")
    await handle.signal(SIGNAL_APPROVE, ApprovalInput(gate="shed-tier/D4", approver="carol"))
    return handle


async def escalation_compensated(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    # Recorded after `compensate-each-shed-tier`: a later step fails after an approved
    # escalation, and the saga undoes the escalation and the automatic tier each.
    def fail(name: str, request: BaseModel) -> bool:
        return name == "promote_warm"

    fleet.fail = fail
    return await escalated_shed_tier_rolled_back(client, tq, fleet)


async def rollout_not_churned(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    # Recorded after `rollout-not-churned`, `rollout-not-triaged` and `rates-after-deroute`.
    fleet.common_causes = ["rollout"]
    for pod in (f"{fleet.pool}-2", f"{fleet.pool}-3"):
        fleet.kill(pod)
    return await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-3"))


async def replacement_on_the_same_node(
    client: Client, tq: str, fleet: Fleet
) -> WorkflowHandle[Any, Any]:
    # Recorded after `hold-cold-replacements`, `triage-refusal-skips-the-node` and
    # `verify-counts-promoted-spares`: the evicted pod's replacement lands on its node, so
    # triage refuses the node, and the replacement is held cold and ramped.
    dead, replacement = f"{fleet.pool}-3", f"{fleet.pool}-3-new"
    fleet.kill(dead)
    fleet.pods[replacement] = Pod(node=fleet.pods[dead].node, weight=None)
    fleet.replacements[replacement] = True
    fleet.refuse = lambda name, request: name == "triage_node"
    return await report_loss(client, tq, fleet, loss_of(fleet, dead))


async def cold_replacement_held_at_what_it_serves(
    client: Client, tq: str, fleet: Fleet
) -> WorkflowHandle[Any, Any]:
    # Recorded after `hold-share-from-measured-rate`: the replacement is held at the floor
    # share, its warm-up measures 6 req/s of the pool's 160 and it is probed at 3%.
    dead, replacement = f"{fleet.pool}-3", f"{fleet.pool}-3-new"
    fleet.kill(dead)
    fleet.pods[replacement] = Pod(node=f"gpu-{fleet.pool}-9", weight=None)
    fleet.replacements[replacement] = True
    fleet.warm_up_rates[replacement] = 6.0
    return await report_loss(client, tq, fleet, loss_of(fleet, dead))


async def deroute_first(client: Client, tq: str, fleet: Fleet) -> WorkflowHandle[Any, Any]:
    # Recorded after `deroute-first`: assess and the routing read run as local
    # activities, and the severity reaches the channel once the endpoint is out.
    fleet.kill(f"{fleet.pool}-3")
    return await report_loss(client, tq, fleet, loss_of(fleet, f"{fleet.pool}-3"))


async def severity_told_before_the_blast_radius_gate(
    client: Client, tq: str, fleet: Fleet
) -> WorkflowHandle[Any, Any]:
    # Recorded after `deroute-first`: the channel hears the severity before the
    # blast-radius gate opens (and times out).
    return await three_lost(client, tq, fleet)


SCENARIOS: dict[str, tuple[Drive, dict[str, int]]] = {
    "warm_spare_recovery": (warm_spare_recovery, {"warm": 1}),
    "provision_approved": (provision_approved, {"warm": 0}),
    "gates_time_out": (gates_time_out, {"warm": 0}),
    "late_loss_and_resolved_alert": (late_loss_and_resolved_alert, {"warm": 0}),
    "failure_compensated": (failure_compensated, {"warm": 1}),
    "aborted": (aborted, {"warm": 0}),
    "cancelled": (cancelled, {"warm": 0}),
    "dry_run": (dry_run, {"warm": 1}),
    "half_open_retries": (half_open_retries, {"warm": 1}),
    "continue_as_new": (continue_as_new, {"warm": 1}),
    "warm_floor_rebuilt": (warm_floor_rebuilt, {"warm": 1}),
    "escalated_shed_tier_rolled_back": (escalated_shed_tier_rolled_back, {"warm": 1}),
    # The same incident, recorded after `roll-back-tiers-newest-first`.
    "escalation_undone_newest_first": (escalated_shed_tier_rolled_back, {"warm": 1}),
    "escalation_compensated": (escalation_compensated, {"warm": 1}),
    "rollout_not_churned": (rollout_not_churned, {"warm": 0}),
    "replacement_on_the_same_node": (replacement_on_the_same_node, {"warm": 0}),
    "deroute_first": (deroute_first, {"warm": 1}),
    "cold_replacement_held_at_what_it_serves": (
        cold_replacement_held_at_what_it_serves,
        {"warm": 0},
    ),
    "severity_told_before_the_blast_radius_gate": (
        severity_told_before_the_blast_radius_gate,
        {"warm": 1},
    ),
}


async def record(
    env: WorkflowEnvironment,
    name: str,
    drive: Drive,
    fleet_args: dict[str, int],
    index: dict[str, str],
) -> list[Path]:
    fleet = new_fleet(serving=8, **fleet_args)
    tq = f"record-{uuid.uuid4()}"
    client = env.client
    written: list[Path] = []
    async with running_worker(client, tq, fleet):
        handle = await drive(client, tq, fleet)
        # Failed and cancelled incidents are scenarios too.
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()
        status = await status_of(handle)
        runs: list[WorkflowHandle[Any, Any]] = []
        run_id: str | None = handle.first_execution_run_id or handle.result_run_id
        while run_id:
            run = client.get_workflow_handle(handle.id, run_id=run_id)
            runs.append(run)
            run_id = None
            async for event in run.fetch_history_events():
                if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                    run_id = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        for number, run in enumerate(runs):
            path = HERE / f"{name}.run{number + 1}.json"
            path.write_text((await run.fetch_history()).to_json())
            index[path.name] = handle.id
            written.append(path)
        reconcile = client.get_workflow_handle(reconcile_workflow_id(status.incident_id))
        path = HERE / f"{name}.reconcile.json"
        path.write_text((await reconcile.fetch_history()).to_json())
        index[path.name] = reconcile.id
        written.append(path)
    return written


async def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"no such scenario: {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    chosen = names or list(SCENARIOS)
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=temporal_binary("temporal-test-server"),
        data_converter=pydantic_data_converter,
    )
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                search_attributes={
                    n: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for n in SEARCH_ATTRIBUTES
                },
                namespace=env.client.namespace,
            )
        )
        index: dict[str, str] = json.loads((HERE / INDEX).read_text()) if names else {}
        for old in HERE.glob("*.json"):
            if old.name != INDEX and old.name.split(".")[0] in chosen:
                old.unlink()
                index.pop(old.name, None)
        # The workflow id is an input of the workflow code (the incident id derives from it).
        for name in chosen:
            drive, fleet_args = SCENARIOS[name]
            for path in await record(env, name, drive, fleet_args, index):
                print(path.relative_to(HERE.parent.parent))
        (HERE / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
