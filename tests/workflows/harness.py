"""Starting an incident the way the intake does, against a fake fleet, on a test server."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

from tests.workflows.fakes import FakeActivities, Fleet
from worker.sandbox import workflow_runner
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

NAMESPACE = "serving"
STARTS_AT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def new_fleet(**kwargs: Any) -> Fleet:
    """A fleet whose pool name is unique, so incidents of different tests never share an id."""
    return Fleet.build(NAMESPACE, f"llama-{uuid.uuid4().hex[:8]}", **kwargs)


def loss_of(
    fleet: Fleet, pod: str, *, fingerprint: str | None = None, **kwargs: Any
) -> LostReplica:
    return LostReplica(
        namespace=fleet.namespace,
        pool=fleet.pool,
        pod=pod,
        node=fleet.pods[pod].node,
        fault="node-not-ready",
        alertname="InferenceReplicaLost",
        fingerprint=fingerprint or f"fp-{pod}",
        starts_at=STARTS_AT,
        **kwargs,
    )


@asynccontextmanager
async def running_worker(client: Client, task_queue: str, fleet: Fleet) -> AsyncIterator[Worker]:
    try:
        async with Worker(
            client,
            task_queue=task_queue,
            workflows=[ReplicaLossWorkflow, ReconcileWorkflow],
            activities=FakeActivities(fleet).all(),
            # The worker's own sandbox, so every workflow test runs with its pass-throughs.
            workflow_runner=workflow_runner(),
        ) as worker:
            yield worker
    finally:
        # A test that failed part-way leaves its incident running with nobody to serve its
        # activities, and the shared time-skipping server then stops skipping for every
        # later test: end whatever this test left behind.
        await _terminate_leftovers(client, task_queue)


_STARTED: dict[str, list[WorkflowHandle[Any, Any]]] = {}


async def _terminate_leftovers(client: Client, task_queue: str) -> None:
    for handle in _STARTED.pop(task_queue, []):
        with contextlib.suppress(Exception):
            await handle.terminate(reason="test ended")


async def report_loss(
    client: Client, task_queue: str, fleet: Fleet, loss: LostReplica, **input: Any
) -> WorkflowHandle[Any, Any]:
    """Signal-with-start exactly as `worker/intake.py` does it."""
    handle = await client.start_workflow(
        WORKFLOW_NAME,
        IncidentInput(namespace=fleet.namespace, pool=fleet.pool, **input),
        id=incident_workflow_id(fleet.namespace, fleet.pool),
        task_queue=task_queue,
        start_signal=SIGNAL_REPLICA_LOST,
        start_signal_args=[loss],
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        result_type=IncidentResult,
    )
    _STARTED.setdefault(task_queue, []).append(handle)
    return handle


async def status_of(handle: WorkflowHandle[Any, Any]) -> IncidentStatus:
    return await handle.query(QUERY_STATUS, result_type=IncidentStatus)


async def wait_for_gate(handle: WorkflowHandle[Any, Any], gate: str) -> None:
    for _ in range(200):
        status = await status_of(handle)
        if any(g.gate == gate for g in status.pending_gates):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"gate {gate} never opened")
