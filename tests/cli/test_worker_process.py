"""worker/main.py: the worker runs workflows, drains gracefully on stop/SIGTERM, reports health."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import uuid
from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from tests.cli.sample_incident import SampleSlowWorkflow, sample_slow_step
from worker.main import WorkerOptions, build_worker, run_worker
from worker.settings import load_settings

HERE = Path(__file__).parent


def write_kubeconfig(directory: Path) -> Path:
    """A kubeconfig for a cluster nobody dials in these tests (building clients is lazy)."""
    path = directory / "kubeconfig"
    path.write_text(
        """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""
    )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_activity_pool_is_sized_to_the_activity_concurrency(
    local_env: WorkflowEnvironment,
) -> None:
    settings = load_settings(max_concurrent_activities=3, task_queue="tq-size")
    worker = build_worker(
        local_env.client, settings, workflows=[SampleSlowWorkflow], activities=[sample_slow_step]
    )
    config = worker.config()
    assert config["max_concurrent_activities"] == 3
    executor = config["activity_executor"]
    assert executor is not None
    assert executor._max_workers == 3  # type: ignore[attr-defined]


async def test_stopping_lets_a_running_activity_finish_before_the_worker_exits(
    local_env: WorkflowEnvironment, task_queue: str
) -> None:
    settings = load_settings(task_queue=task_queue)
    stop = asyncio.Event()
    port = free_port()
    runner = asyncio.create_task(
        run_worker(
            settings,
            stop_event=stop,
            options=WorkerOptions(
                graceful_shutdown_s=20, health_port=port, health_host="127.0.0.1"
            ),
            client=local_env.client,
            workflows=[SampleSlowWorkflow],
            activities=[sample_slow_step],
            install_signal_handlers=False,
        )
    )
    handle = await local_env.client.start_workflow(
        SampleSlowWorkflow.run, 1.5, id=f"slow-{uuid.uuid4()}", task_queue=task_queue
    )
    # Wait until the activity is running, then ask the worker to stop.
    for _ in range(100):
        description = await handle.describe()
        if description.raw_description.pending_activities:
            break
        await asyncio.sleep(0.05)
    async with httpx.AsyncClient() as http:
        ready = await http.get(f"http://127.0.0.1:{port}/readyz")
        metrics = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert ready.status_code == 200
    assert "fleetmend_worker_up 1.0" in metrics.text
    stop.set()
    await asyncio.wait_for(runner, timeout=30)
    # The activity completed on this worker during the drain: its result is recorded.
    history = await handle.fetch_history()
    completed = [
        e for e in history.events if e.HasField("activity_task_completed_event_attributes")
    ]
    assert len(completed) == 1


async def test_sigterm_drains_the_worker_process_and_it_exits_cleanly(
    local_env: WorkflowEnvironment, task_queue: str
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "FLEETMEND_TEMPORAL_ADDRESS": local_env.client.service_client.config.target_host,
        "FLEETMEND_TASK_QUEUE": task_queue,
        "FLEETMEND_WORKER_HEALTH_PORT": str(port),
        "FLEETMEND_WORKER_HEALTH_HOST": "127.0.0.1",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "sample_worker.py"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(200):
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        handle = await local_env.client.start_workflow(
            SampleSlowWorkflow.run, 2.0, id=f"slow-{uuid.uuid4()}", task_queue=task_queue
        )
        for _ in range(200):
            if (await handle.describe()).raw_description.pending_activities:
                break
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert "running activities get" in err.decode()
    # The activity finished during the drain; no other worker was needed.
    history = await handle.fetch_history()
    assert any(e.HasField("activity_task_completed_event_attributes") for e in history.events)


async def test_the_worker_registers_the_real_incident_and_reconcile_workflows(
    local_env: WorkflowEnvironment,
) -> None:
    from worker.main import load_workflows

    workflows = load_workflows()
    # Building the worker runs the sandbox validation of every workflow class.
    worker = build_worker(
        local_env.client, load_settings(task_queue="tq-real"), workflows=workflows
    )
    names = {
        getattr(w, "__temporal_workflow_definition").name for w in worker.config()["workflows"]
    }
    assert names == {"ReplicaLossWorkflow", "ReconcileWorkflow"}


def test_the_worker_binds_every_activity_to_a_cluster_a_ledger_and_http(
    tmp_path: Path, database_url: str
) -> None:
    from worker.main import load_activities

    kubeconfig = write_kubeconfig(tmp_path)
    settings = load_settings(database_url=database_url, kubeconfig=kubeconfig)
    activities, close = load_activities(settings)
    try:
        names = {getattr(a, "__temporal_activity_definition").name for a in activities}
    finally:
        close()
    assert {"assess_loss", "deroute_replica", "ramp_traffic", "triage_node"} <= names
    assert len(names) == len(activities)  # no activity registered twice


async def test_the_worker_exports_the_sdk_metrics_for_prometheus(
    local_env: WorkflowEnvironment, task_queue: str
) -> None:
    metrics_port = free_port()
    settings = load_settings(
        task_queue=task_queue,
        temporal_address=local_env.client.service_client.config.target_host,
    )
    stop = asyncio.Event()
    runner = asyncio.create_task(
        run_worker(
            settings,
            stop_event=stop,
            options=WorkerOptions(
                health_port=None, metrics_address=f"127.0.0.1:{metrics_port}", graceful_shutdown_s=1
            ),
            workflows=[SampleSlowWorkflow],
            activities=[sample_slow_step],
            install_signal_handlers=False,
        )
    )
    try:
        await local_env.client.execute_workflow(
            SampleSlowWorkflow.run, 0.1, id=f"slow-{uuid.uuid4()}", task_queue=task_queue
        )
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
    finally:
        stop.set()
        await asyncio.wait_for(runner, timeout=30)
    assert "temporal_activity_execution_latency" in text
    assert f'task_queue="{task_queue}"' in text


async def test_fleetmend_worker_runs_the_real_workflows_and_exits_0_on_sigterm(
    local_env: WorkflowEnvironment, task_queue: str, database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FLEETMEND_")},
        "FLEETMEND_TEMPORAL_ADDRESS": local_env.client.service_client.config.target_host,
        "FLEETMEND_TASK_QUEUE": task_queue,
        "FLEETMEND_DATABASE_URL": load_settings(database_url=database_url).database_url or "",
        "FLEETMEND_KUBECONFIG": str(write_kubeconfig(tmp_path)),
        "FLEETMEND_WORKER_HEALTH_PORT": str(port),
        "FLEETMEND_WORKER_HEALTH_HOST": "127.0.0.1",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "worker.cli",
        "worker",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    ready = False
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(300):
                with contextlib.suppress(httpx.TransportError):
                    ready = (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
                if ready or proc.returncode is not None:
                    break
                await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert ready, err.decode()
    assert proc.returncode == 0, err.decode()
    assert "worker stopped" in err.decode()
