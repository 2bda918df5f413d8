"""Builders for Alertmanager payloads and an intake wired to the real Temporal dev server."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from worker.intake import IntakeOptions, create_app
from worker.settings import Settings, load_settings

TOKEN = "test-token-7c1e"  # test-only credential, never a real secret
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but never listening: connects are refused, and nobody else can take it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def alert(
    *,
    status: str = "firing",
    starts_at: str = "2026-11-29T08:00:00Z",
    fingerprint: str | None = None,
    **labels: str,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": status,
        "labels": {"alertname": "FleetmendPodNotReady", **labels},
        "annotations": {"summary": "a replica left the ready set"},
        "startsAt": starts_at,
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-29T08:10:00Z",
        "generatorURL": "http://prometheus.example/graph",
    }
    if fingerprint is not None:
        body["fingerprint"] = fingerprint
    return body


def notification(*alerts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A version-4 notification as Alertmanager 0.25+ sends it (plus newer keys)."""
    status = "firing" if any(a.get("status") == "firing" for a in alerts) else "resolved"
    return {
        "version": "4",
        "groupKey": '{}:{alertname="FleetmendPodNotReady"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "fleetmend",
        "groupLabels": {"alertname": "FleetmendPodNotReady"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example",
        "alerts": list(alerts),
        **extra,
    }


@dataclass
class Intake:
    http: httpx.AsyncClient
    settings: Settings
    temporal: Client
    app: Any

    async def post(self, payload: Any, *, token: str | None = TOKEN) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return await self.http.post("/alertmanager", json=payload, headers=headers)

    async def get(self, path: str) -> httpx.Response:
        return await self.http.get(path, headers=AUTH)

    async def runs(self, workflow_id: str, expected: int) -> int:
        return await count_runs(self.temporal, workflow_id, expected)

    async def absent(self, workflow_id: str) -> bool:
        return await no_workflow(self.temporal, workflow_id)


async def count_runs(client: Client, workflow_id: str, expected: int) -> int:
    """How many runs visibility lists for the id, read once it shows `expected` (or 10 s).

    Visibility is eventually consistent: a run started a moment ago may not be listed yet.
    After the expected count shows, one more read a little later catches a surplus run.
    """
    query = f"WorkflowId = '{workflow_id}'"
    for _ in range(100):
        if len([wf async for wf in client.list_workflows(query)]) >= expected:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.3)
    return len([wf async for wf in client.list_workflows(query)])


async def no_workflow(client: Client, workflow_id: str) -> bool:
    """True when no execution has the id (describe is strongly consistent, unlike list)."""
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return True
        raise
    return False


@pytest_asyncio.fixture
async def intake(local_env: WorkflowEnvironment, task_queue: str) -> AsyncIterator[Intake]:
    settings = load_settings(intake_token=TOKEN, task_queue=task_queue)
    app = create_app(settings, client=local_env.client, options=IntakeOptions())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://intake"
    ) as http:
        yield Intake(http=http, settings=settings, temporal=local_env.client, app=app)


@pytest.fixture
def pool() -> str:
    return unique("pool")


@dataclass
class IntakeProcess:
    url: str
    task_queue: str
    proc: asyncio.subprocess.Process


async def start_intake_process(
    env_extra: dict[str, str], *, port: int | None = None
) -> IntakeProcess:
    """An intake process; `port` to come back where a killed one was (else a free one)."""
    port = port or free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FLEETMEND_")},
        "FLEETMEND_INTAKE_TOKEN": TOKEN,
        "FLEETMEND_INTAKE_HOST": "127.0.0.1",
        "FLEETMEND_INTAKE_PORT": str(port),
        "FLEETMEND_LOG_LEVEL": "WARNING",
        **env_extra,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "worker.cli",
        "intake",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as http:
        for _ in range(300):
            try:
                if (await http.get(f"{url}/healthz")).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.returncode is not None:
                raise RuntimeError(f"intake exited with {proc.returncode}")
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError("intake did not come up")
    return IntakeProcess(url, env.get("FLEETMEND_TASK_QUEUE", ""), proc)


async def stop_intake_process(intake: IntakeProcess) -> int | None:
    code = intake.proc.returncode
    if code is None:
        intake.proc.terminate()
        await asyncio.wait_for(intake.proc.wait(), timeout=20)
    return code
