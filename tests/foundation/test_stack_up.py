"""`fleetmend up` brings the whole local stack up and Ctrl-C takes all of it down again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def _postmaster_pid(pgdata: Path) -> int | None:
    pidfile = pgdata / "postmaster.pid"
    return int(pidfile.read_text().split()[0]) if pidfile.exists() else None


KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: none, user: {token: unused}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


@pytest.fixture
def stack_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETMEND_")}
    env.update(
        FLEETMEND_STATE_DIR=str(tmp_path / "state"),
        FLEETMEND_TEMPORAL_ADDRESS=f"127.0.0.1:{_free_port()}",
        FLEETMEND_TEMPORAL_UI_PORT=str(_free_port()),
        FLEETMEND_INTAKE_PORT=str(_free_port()),
        FLEETMEND_TASK_QUEUE="fleetmend-up-test",
        FLEETMEND_KUBECONFIG=str(kubeconfig),
    )
    yield env


async def _pollers(address: str, task_queue: str) -> int:
    client = await Client.connect(address)
    resp = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace="default",
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return len(resp.pollers)


def _wait_for(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def test_up_serves_the_ui_polls_the_task_queue_and_stops_everything_on_ctrl_c(
    stack_env: dict[str, str],
) -> None:
    state = Path(stack_env["FLEETMEND_STATE_DIR"])
    up = subprocess.Popen(
        [sys.executable, "-m", "worker.cli", "up"],
        env=stack_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        assert up.stdout is not None
        for line in up.stdout:
            lines.append(line)
            if "ready; Ctrl-C stops everything" in line:
                break
        else:
            raise AssertionError("fleetmend up exited before ready:\n" + "".join(lines))

        ui = f"http://127.0.0.1:{stack_env['FLEETMEND_TEMPORAL_UI_PORT']}/"
        assert httpx.get(ui, timeout=10).status_code == 200

        address = stack_env["FLEETMEND_TEMPORAL_ADDRESS"]
        _wait_for(
            lambda: asyncio.run(_pollers(address, "fleetmend-up-test")) > 0,
            60,
            "the worker to poll the task queue",
        )
        intake = f"http://127.0.0.1:{stack_env['FLEETMEND_INTAKE_PORT']}/healthz"
        _wait_for(lambda: _http_ok(intake), 30, "the intake to answer /healthz")

        children = json.loads((state / "stack.json").read_text())["children"]
        assert set(children) == {"temporal", "worker", "intake"}
        postmaster = _postmaster_pid(state / "pgdata")
        assert postmaster is not None and _alive(postmaster)

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=90) == 0
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()

    for name, pid in children.items():
        assert not _alive(pid), f"{name} (pid {pid}) outlived fleetmend up"
    assert not _alive(postmaster), "the embedded PostgreSQL outlived fleetmend up"
    assert not (state / "stack.json").exists()


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
