"""The incident workflow with the real activities, against fleetsim and a real ledger.

fleetsim serves the Kubernetes API (enforcing deploy/rbac.yaml), the replicas' /metrics
and the router; the ledger is a fresh migrated PostgreSQL. The effects are counted on the fleet (its objects' state),
not read back from the ledger.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities import build_activities
from activities.config import ActivitySettings
from activities.effects import EffectRunner
from ledger.store import Ledger
from tests.activities.conftest import NS, POOL, FleetHandle, scenario
from workflows.reconcile import ReconcileWorkflow
from workflows.replica_loss import ReplicaLossWorkflow
from workflows.types import (
    QUERY_STATUS,
    SIGNAL_REPLICA_LOST,
    WORKFLOW_NAME,
    IncidentInput,
    IncidentResult,
    IncidentStatus,
    LostReplica,
    incident_workflow_id,
)

# Short windows so the run takes seconds; the shapes are the production ones.
FAST = {
    "probe_window_s": 2.0,
    "ramp_steps": 2,
    "ramp_step_interval_s": 2.0,
    "cooldown_s": 2.0,
    "gate_timeout_s": 30.0,
    "verify_attempts": 2,
    "verify_interval_s": 5.0,
}


@pytest.fixture
def fleet() -> Iterator[FleetHandle]:
    # The API server enforces deploy/rbac.yaml for the worker's ServiceAccount token, so the
    # whole incident shows the worker needs nothing the file does not grant.
    handle = FleetHandle(
        scenario(replicas=4, warm=1, rate=6.0, warm_rate=4.0), speed=10.0, rbac=True
    )
    try:
        yield handle
    finally:
        handle.close()


DEADLINE_S = 150.0


def explain(status: IncidentStatus, description: Any) -> str:
    lines = [f"{e.step} {e.outcome} {str(e.evidence)[:240]}" for e in status.timeline]
    for pending in description.raw_description.pending_activities:
        lines.append(
            f"PENDING {pending.activity_type.name} attempt {pending.attempt}: "
            f"{pending.last_failure.message[:240]}"
        )
    return "\n".join(lines)


def routed(fleet: FleetHandle) -> list[str]:  # pods carrying the router-only label
    return [p["metadata"]["name"] for p in fleet.pods(f"app={POOL},serving=true")]


async def test_a_lost_replica_on_fleetsim_is_derouted_and_replaced_by_a_promoted_warm_spare(
    local_env: WorkflowEnvironment, task_queue: str, fleet: FleetHandle, database_url: str
) -> None:
    before = routed(fleet)
    victim = fleet.pods(f"app={POOL},pool=serving")[1]
    injected = fleet.call(
        fleet.fleet.inject,
        {"at": 0, "kind": "node-not-ready", "target": {"node": victim["spec"]["nodeName"]}},
    )
    loss = LostReplica(
        namespace=NS,
        pool=POOL,
        pod=victim["metadata"]["name"],
        node=victim["spec"]["nodeName"],
        fault="node-not-ready",
        fingerprint=f"e2e-{uuid.uuid4().hex[:8]}",
    )
    ledger = Ledger.connect(database_url)
    settings = ActivitySettings(poll_interval_s=0.1, kubernetes_timeout_s=5.0)
    activities = build_activities(fleet.api, EffectRunner(ledger), fleet.http, settings)
    client = local_env.client
    handle = await client.start_workflow(
        WORKFLOW_NAME,
        IncidentInput(namespace=NS, pool=POOL, **FAST),
        id=incident_workflow_id(NS, f"{POOL}-{uuid.uuid4().hex[:6]}"),
        task_queue=task_queue,
        start_signal=SIGNAL_REPLICA_LOST,
        start_signal_args=[loss],
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        result_type=IncidentResult,
    )
    try:
        with ThreadPoolExecutor(8) as pool:
            async with Worker(
                client,
                task_queue=task_queue,
                workflows=[ReplicaLossWorkflow, ReconcileWorkflow],
                activities=activities,
                activity_executor=pool,
            ):
                try:
                    result = await asyncio.wait_for(handle.result(), DEADLINE_S)
                finally:
                    status: IncidentStatus = await handle.query(
                        QUERY_STATUS, result_type=IncidentStatus
                    )
                    print(explain(status, await handle.describe()), flush=True)
    finally:
        ledger.close()
    labels = {
        p["metadata"]["name"]: p["metadata"].get("labels") or {} for p in fleet.pods(f"app={POOL}")
    }
    promoted = next(e for e in status.timeline if e.step == "promote-warm").evidence["promoted"]
    steps = [e.step for e in status.timeline]
    assert injected.nodes
    # Derouted by the router-only label, and never routed back.
    assert loss.pod in before and "serving" not in labels[loss.pod]
    # A warm spare of the same model and revision took its place, at a full share.
    assert promoted and all(labels[p].get("serving") == "true" for p in promoted)
    assert status.outcome in ("recovered", "recovered-measures-kept")
    assert steps.index("deroute") < steps.index("protect") < steps.index("promote-warm")
    assert [e.outcome for e in status.timeline if e.step == "half-open"] == ["passed"]
    assert result.steps[-1] == "roll-back"
    # The whole incident's effects went through the ledger under this incident's op ids.
    operations = Ledger.connect(database_url)
    try:
        recorded = [op.op_id for op in operations.operations(result.incident_id)]
    finally:
        operations.close()
    assert recorded and all(op.startswith(result.incident_id + "/") for op in recorded)
    assert fleet.authorizer is not None and fleet.authorizer.denied == []
