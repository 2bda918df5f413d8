"""A real Alertmanager (Debian's prometheus-alertmanager) notifying a real intake process.

Alertmanager gets deploy/alertmanager.yml's receiver shape (webhook, bearer token,
send_resolved) with short timers, so that in seconds it sends the first notification,
group_interval resends when a group changes and repeat_interval resends when nothing
changed. The test posts alerts to Alertmanager's own API, several times over, and then
reads Temporal: one incident per pool, each alert delivered with one dedupe key, the
resolved notifications recorded on the incidents.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest_asyncio
import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests.intake.conftest import (
    AUTH,
    TOKEN,
    IntakeProcess,
    count_runs,
    free_port,
    start_intake_process,
    stop_intake_process,
    unique,
)
from workflows.types import (
    SIGNAL_ALERT_RESOLVED,
    SIGNAL_REPLICA_LOST,
    AlertResolved,
    LostReplica,
    incident_workflow_id,
)

REPO = Path(__file__).resolve().parents[2]


def alertmanager_binary() -> str:
    path = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if path is None:
        raise RuntimeError(
            "prometheus-alertmanager is not installed: "
            "apt-get install prometheus-alertmanager (.ci/run does)"
        )
    return path


def alertmanager_config(intake_url: str) -> dict[str, Any]:
    """deploy/alertmanager.yml with the intake's URL and timers shortened to seconds."""
    config = yaml.safe_load((REPO / "deploy" / "alertmanager.yml").read_text())
    config["route"].update(group_wait="1s", group_interval="2s", repeat_interval="3s")
    for route in config["route"].get("routes", []):
        route.update(group_wait="1s", group_interval="2s", repeat_interval="3s")
    receiver = next(r for r in config["receivers"] if r["name"] == "fleetmend")
    webhook = receiver["webhook_configs"][0]
    webhook["url"] = f"{intake_url}/alertmanager"
    # The example reads the token from a mounted Secret; here it is inline.
    webhook["http_config"]["authorization"] = {"type": "Bearer", "credentials": TOKEN}
    return config


@contextlib.asynccontextmanager
async def running_alertmanager(config: dict[str, Any], tmp_path: Path) -> AsyncIterator[str]:
    """Alertmanager on a free port with `config`; yields its URL, stops it at the end."""
    config_path = tmp_path / "am.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "alertmanager.log").open("wb")
    am = subprocess.Popen(
        [
            alertmanager_binary(),
            f"--config.file={config_path}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=debug",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(100):
                try:
                    if (await http.get(f"{url}/-/ready")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError(
                    f"alertmanager did not start: {(tmp_path / 'alertmanager.log').read_text()}"
                )
        yield url
    finally:
        am.terminate()
        am.wait(timeout=20)
        log.close()


@pytest_asyncio.fixture
async def stack(
    local_env: WorkflowEnvironment, tmp_path: Path
) -> AsyncIterator[tuple[IntakeProcess, str]]:
    intake = await start_intake_process(
        {
            "FLEETMEND_TEMPORAL_ADDRESS": local_env.client.service_client.config.target_host,
            "FLEETMEND_TASK_QUEUE": unique("tq-am"),
        }
    )
    try:
        async with running_alertmanager(alertmanager_config(intake.url), tmp_path) as url:
            yield intake, url
    finally:
        await stop_intake_process(intake)


def am_alert(alertname: str, ends: datetime | None = None, **labels: str) -> dict[str, Any]:
    """An alert as Prometheus posts it, with the routing label deploy/alert-rules.yaml sets."""
    body: dict[str, Any] = {
        "labels": {"alertname": alertname, "fleetmend": "true", **labels},
        "annotations": {"summary": f"{alertname} on {labels.get('pod') or labels.get('node')}"},
        "generatorURL": "http://prometheus.example/graph",
    }
    if ends is not None:
        body["endsAt"] = ends.isoformat().replace("+00:00", "Z")
    return body


async def signals(client: Client, workflow_id: str, name: str, model: type) -> list[Any]:
    converter = pydantic_data_converter.payload_converter
    found = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name == name:
                found.append(converter.from_payloads(attrs.input.payloads, [model])[0])
    return found


async def metric(http: httpx.AsyncClient, url: str, line_prefix: str) -> float:
    text = (await http.get(f"{url}/metrics", headers=AUTH)).text
    for line in text.splitlines():
        if line.startswith(line_prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_alertmanager_notifications_start_one_incident_per_pool_despite_resends(
    stack: tuple[IntakeProcess, str], local_env: WorkflowEnvironment
) -> None:
    intake, am_url = stack
    client = local_env.client
    pool_a, pool_b = unique("pool"), unique("pool")
    firing = [
        am_alert("FleetmendPodNotReady", namespace="llm", pool=pool_a, pod=f"{pool_a}-1"),
        am_alert("GPUXidError", namespace="llm", pool=pool_a, pod=f"{pool_a}-2", node="gpu-3"),
        am_alert("FleetmendPodNotReady", namespace="llm", pool=pool_b, pod=f"{pool_b}-1"),
        # No pool label: the intake rejects it, and nothing else of its batch is lost.
        am_alert("FleetmendPodNotReady", namespace="llm", pod="orphan-1"),
    ]
    async with httpx.AsyncClient() as http:
        # Prometheus re-sends firing alerts every evaluation; Alertmanager must fold them.
        for _ in range(3):
            response = await http.post(f"{am_url}/api/v2/alerts", json=firing)
            assert response.status_code == 200, response.text
            await asyncio.sleep(0.5)

        wid_a, wid_b = incident_workflow_id("llm", pool_a), incident_workflow_id("llm", pool_b)
        signalled = 'fleetmend_intake_alerts_accepted_total{outcome="signalled"}'
        for _ in range(200):  # until at least one resend (group_interval / repeat_interval)
            if await metric(http, intake.url, signalled) >= 2:
                break
            await asyncio.sleep(0.1)
        assert await metric(http, intake.url, signalled) >= 2, "Alertmanager never resent"

        for wid in (wid_a, wid_b):
            assert await count_runs(client, wid, 1) == 1, wid
        assert await metric(http, intake.url, "fleetmend_intake_incidents_started_total") == 2
        rejected = 'fleetmend_intake_alerts_rejected_total{reason="missing_pool"}'
        assert await metric(http, intake.url, rejected) >= 1

        losses_a = await signals(client, wid_a, SIGNAL_REPLICA_LOST, LostReplica)
        assert {loss.pod for loss in losses_a} == {f"{pool_a}-1", f"{pool_a}-2"}
        # Resends carry the dedupe key of the alert they repeat: two alerts, two keys.
        assert len({(loss.fingerprint, loss.starts_at) for loss in losses_a}) == 2
        xid = next(loss for loss in losses_a if loss.pod == f"{pool_a}-2")
        assert (xid.fault, xid.node) == ("gpu-xid", "gpu-3")

        # Resolve pool B's alert: Alertmanager sends a resolved notification (send_resolved).
        ended = datetime.now(UTC) - timedelta(seconds=1)
        resolved = am_alert(
            "FleetmendPodNotReady", ends=ended, namespace="llm", pool=pool_b, pod=f"{pool_b}-1"
        )
        assert (await http.post(f"{am_url}/api/v2/alerts", json=[resolved])).status_code == 200
        for _ in range(200):
            if await signals(client, wid_b, SIGNAL_ALERT_RESOLVED, AlertResolved):
                break
            await asyncio.sleep(0.1)
        [resolution, *_] = await signals(client, wid_b, SIGNAL_ALERT_RESOLVED, AlertResolved)
        assert resolution.pod == f"{pool_b}-1"
        # Still one incident for B: a resolution never starts anything.
        assert await count_runs(client, wid_b, 1) == 1
