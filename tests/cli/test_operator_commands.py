"""`fleetmend status` and `fleetmend approve` as real processes against the dev server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from tests.cli.sample_incident import SampleIncident
from worker.main import build_worker
from worker.settings import load_settings
from workflows.types import SIGNAL_REPLICA_LOST, WORKFLOW_NAME, IncidentInput, LostReplica


@dataclass
class Run:
    code: int
    out: str
    err: str


async def fleetmend(*args: str, env: dict[str, str]) -> Run:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "worker.cli",
        *args,
        # Only the variables the test names: a developer's FLEETMEND_* must not leak in.
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("FLEETMEND_")},
            "COLUMNS": "160",
            **env,
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())


def temporal_env(client: Client, task_queue: str) -> dict[str, str]:
    return {
        "FLEETMEND_TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "FLEETMEND_TEMPORAL_NAMESPACE": client.namespace,
        "FLEETMEND_TASK_QUEUE": task_queue,
    }


@dataclass
class OpenIncident:
    workflow_id: str
    env: dict[str, str]
    client: Client


@pytest_asyncio.fixture
async def open_incident(
    local_env: WorkflowEnvironment, task_queue: str
) -> AsyncIterator[OpenIncident]:
    client = local_env.client
    settings = load_settings(task_queue=task_queue)
    pool = f"pool-{uuid.uuid4().hex[:8]}"
    wid = f"replica-loss/llm/{pool}"
    worker = build_worker(client, settings, workflows=[SampleIncident], activities=[])
    async with worker:
        await client.start_workflow(
            WORKFLOW_NAME,
            IncidentInput(namespace="llm", pool=pool),
            id=wid,
            task_queue=task_queue,
            start_signal=SIGNAL_REPLICA_LOST,
            start_signal_args=[LostReplica(namespace="llm", pool=pool, pod=f"{pool}-1")],
        )
        yield OpenIncident(wid, temporal_env(client, task_queue), client)
        with contextlib.suppress(RPCError):  # deciding the last gate closed it already
            await client.get_workflow_handle(wid).terminate("test over")


async def test_status_renders_the_step_pending_gates_and_timeline(
    open_incident: OpenIncident,
) -> None:
    run = await fleetmend("status", open_incident.workflow_id, env=open_incident.env)
    assert run.code == 0, run.err
    for expected in (
        open_incident.workflow_id,
        "step: protect",
        "severity: degraded",
        "incident id: inc-20261129-0800",
        "pending gates",
        "blast-radius",
        "deroute 2 of 4 replicas",
        "keep 1 routed",
        "timeline",
        "08:00:01",
        "1.5s",
        "pod-1 out of the slice",
        "deroute_replica",
        "compensations: 0 of 1 done",
        "replicas_lost",
    ):
        assert expected in run.out, (expected, run.out)


async def test_status_accepts_the_short_namespace_slash_pool_form(
    open_incident: OpenIncident,
) -> None:
    short = open_incident.workflow_id.removeprefix("replica-loss/")
    run = await fleetmend("status", short, env=open_incident.env)
    assert run.code == 0, run.err
    assert "step: protect" in run.out


async def test_status_without_an_id_lists_the_open_incidents(open_incident: OpenIncident) -> None:
    for _ in range(50):  # visibility is eventually consistent, even on the dev server
        run = await fleetmend("status", env=open_incident.env)
        if open_incident.workflow_id in run.out:
            break
        await asyncio.sleep(0.2)
    assert run.code == 0, run.err
    assert "open incidents" in run.out
    assert open_incident.workflow_id in run.out


async def test_approve_decides_the_gate_and_the_timeline_records_who(
    open_incident: OpenIncident,
) -> None:
    run = await fleetmend(
        "approve",
        open_incident.workflow_id,
        "blast-radius",
        "--by",
        "alice",
        "--reason",
        "capacity is fine",
        env=open_incident.env,
    )
    assert run.code == 0, run.err
    assert "gate blast-radius approved by alice (recorded: approved)" in run.out
    status = await fleetmend("status", open_incident.workflow_id, env=open_incident.env)
    assert "approved by alice: capacity is fine" in status.out
    assert "no pending gates" in status.out


async def test_deny_is_recorded_as_a_denial(open_incident: OpenIncident) -> None:
    run = await fleetmend(
        "approve",
        open_incident.workflow_id,
        "blast-radius",
        "--by",
        "bob",
        "--deny",
        env=open_incident.env,
    )
    assert run.code == 0, run.err
    assert "gate blast-radius denied by bob (recorded: rejected)" in run.out


async def test_approving_an_unknown_gate_is_one_line_and_non_zero(
    open_incident: OpenIncident,
) -> None:
    run = await fleetmend(
        "approve", open_incident.workflow_id, "no-such-gate", "--by", "alice", env=open_incident.env
    )
    assert run.code == 1
    assert "gate 'no-such-gate' not decided" in run.err
    assert "Traceback" not in run.err
    assert len(run.err.strip().splitlines()) == 1


async def test_status_of_an_unknown_incident_is_one_line_and_non_zero(
    local_env: WorkflowEnvironment, task_queue: str
) -> None:
    run = await fleetmend(
        "status", "replica-loss/llm/never-was", env=temporal_env(local_env.client, task_queue)
    )
    assert run.code == 1
    assert run.err.strip() == (
        "fleetmend: no incident 'replica-loss/llm/never-was' (see `fleetmend status`)"
    )


async def test_status_of_an_incident_no_worker_serves_says_so_in_one_line(
    local_env: WorkflowEnvironment, task_queue: str
) -> None:
    wid = f"replica-loss/llm/orphan-{uuid.uuid4().hex[:6]}"
    await local_env.client.start_workflow(
        WORKFLOW_NAME, IncidentInput(namespace="llm", pool="x"), id=wid, task_queue=task_queue
    )
    try:
        run = await fleetmend("status", wid, env=temporal_env(local_env.client, task_queue))
    finally:
        await local_env.client.get_workflow_handle(wid).terminate("test over")
    assert run.code == 1
    assert "no worker answered" in run.err
    assert len(run.err.strip().splitlines()) == 1
