"""SIGKILL the intake while it handles a real Alertmanager's notification: no alert is lost.

Alertmanager (Debian's prometheus-alertmanager) notifies an intake process whose Temporal
connection runs through `GrpcTap`. The tap catches the intake inside the notification, at
its signal-with-start, and the test kills the intake there (SIGKILL, no clean-up) and
starts a new one on the same port, talking to Temporal directly:

- request frozen: Temporal never heard of the incident when the intake died;
- response frozen: Temporal started it, but the intake died before answering.

Either way the intake had not answered 2xx (it answers only after Temporal accepted), so
Alertmanager retries, and the incident exists exactly once with the alert in it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.intake.conftest import (
    count_runs,
    free_port,
    no_workflow,
    start_intake_process,
    stop_intake_process,
    unique,
)
from tests.intake.grpc_tap import Freeze, GrpcTap
from tests.intake.test_alertmanager_end_to_end import (
    alertmanager_config,
    am_alert,
    running_alertmanager,
    signals,
)
from workflows.types import SIGNAL_REPLICA_LOST, LostReplica, incident_workflow_id

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NAMESPACE = "llm"


@pytest_asyncio.fixture
async def alertmanager(tmp_path: Path) -> AsyncIterator[tuple[str, int]]:
    """(Alertmanager's URL, the intake port it notifies); the intake is the test's."""
    intake_port = free_port()
    config = alertmanager_config(f"http://127.0.0.1:{intake_port}")
    async with running_alertmanager(config, tmp_path) as url:
        yield url, intake_port


async def wait_for(
    what: str, probe: Callable[[], Awaitable[bool]], timeout_s: float = 60.0
) -> None:
    for _ in range(int(timeout_s * 10)):
        if await probe():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def losses(client: Client, workflow_id: str) -> list[LostReplica]:
    found: list[LostReplica] = await signals(client, workflow_id, SIGNAL_REPLICA_LOST, LostReplica)
    return found


@pytest.mark.parametrize("freeze", ["request", "response"])
async def test_an_intake_killed_inside_a_notification_loses_no_alert_and_starts_one_incident(
    freeze: Freeze, alertmanager: tuple[str, int], local_env: WorkflowEnvironment
) -> None:
    am_url, intake_port = alertmanager
    client = local_env.client
    temporal = client.service_client.config.target_host
    pool = unique("pool")
    wid = incident_workflow_id(NAMESPACE, pool)
    task_queue = unique("tq-kill")
    env = {"FLEETMEND_TASK_QUEUE": task_queue}

    async with GrpcTap(temporal, [wid.encode(), SIGNAL_REPLICA_LOST.encode()], freeze) as tap:
        doomed = await start_intake_process(
            {**env, "FLEETMEND_TEMPORAL_ADDRESS": tap.address}, port=intake_port
        )
        alert = am_alert("FleetmendPodNotReady", namespace=NAMESPACE, pool=pool, pod=f"{pool}-1")
        async with httpx.AsyncClient() as http:
            posted = await http.post(f"{am_url}/api/v2/alerts", json=[alert])
            assert posted.status_code == 200, posted.text

        await asyncio.wait_for(tap.caught.wait(), timeout=60)
        if freeze == "response":
            # Temporal has acted on the start; only its answer is stuck in the tap.
            await wait_for("the incident in Temporal", lambda: exists(client, wid))
        doomed.proc.send_signal(signal.SIGKILL)
        assert await doomed.proc.wait() == -signal.SIGKILL
        started_before_the_kill = not await no_workflow(client, wid)
        assert started_before_the_kill is (freeze == "response")

    revived = await start_intake_process(
        {**env, "FLEETMEND_TEMPORAL_ADDRESS": temporal}, port=intake_port
    )
    try:
        # Alertmanager got no 2xx for the notification, so it sends it again.
        minimum = 2 if freeze == "response" else 1
        await wait_for(
            "Alertmanager's retry to reach the incident",
            lambda: has_losses(client, wid, minimum),
        )
        assert await count_runs(client, wid, 1) == 1
        delivered = await losses(client, wid)
        assert {loss.pod for loss in delivered} == {f"{pool}-1"}
        # Every delivery is the same alert, so the workflow takes in one loss.
        assert len({(loss.fingerprint, loss.starts_at) for loss in delivered}) == 1
    finally:
        await stop_intake_process(revived)


async def exists(client: Client, workflow_id: str) -> bool:
    return not await no_workflow(client, workflow_id)


async def has_losses(client: Client, workflow_id: str, minimum: int) -> bool:
    if not await exists(client, workflow_id):
        return False
    return len(await losses(client, workflow_id)) >= minimum
