"""POST /alertmanager against the real Temporal dev server (no worker: starts are enough)."""

from __future__ import annotations

import asyncio
import base64
import logging
import time

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests.intake.conftest import AUTH, TOKEN, Intake, alert, count_runs, notification
from worker.intake import IntakeOptions, create_app
from worker.settings import load_settings
from worker.stack import temporal_binary
from workflows.types import (
    SIGNAL_ALERT_RESOLVED,
    SIGNAL_REPLICA_LOST,
    WORKFLOW_NAME,
    IncidentInput,
    LostReplica,
    incident_workflow_id,
)


async def signals(intake: Intake, workflow_id: str, name: str) -> list[object]:
    handle = intake.temporal.get_workflow_handle(workflow_id)
    found = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name == name:
                found.append(attrs.input)
    return found


async def test_a_firing_alert_starts_the_pools_incident_with_the_loss_as_its_first_signal(
    intake: Intake, pool: str
) -> None:
    response = await intake.post(
        notification(alert(namespace="llm", pool=pool, pod=f"{pool}-1", fingerprint="fp1"))
    )
    assert response.status_code == 200, response.text
    wid = incident_workflow_id("llm", pool)
    assert response.json()["accepted"] == [
        {
            "index": 0,
            "workflow_id": wid,
            "outcome": "started",
            "dedupe_key": "fp1@2026-11-29T08:00:00+00:00",
        }
    ]
    description = await intake.temporal.get_workflow_handle(wid).describe()
    assert description.workflow_type == WORKFLOW_NAME
    assert description.task_queue == intake.settings.task_queue
    assert description.status == WorkflowExecutionStatus.RUNNING

    history = await intake.temporal.get_workflow_handle(wid).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    converter = pydantic_data_converter.payload_converter
    incident = converter.from_payloads(started.input.payloads, [IncidentInput])[0]
    assert (incident.namespace, incident.pool, incident.dry_run) == ("llm", pool, False)
    [lost_payload] = await signals(intake, wid, SIGNAL_REPLICA_LOST)
    lost = converter.from_payloads(lost_payload.payloads, [LostReplica])[0]
    assert (lost.pod, lost.fingerprint, lost.fault) == (f"{pool}-1", "fp1", "pod-not-ready")


async def test_resends_of_the_same_alert_never_start_a_second_incident(
    intake: Intake, pool: str
) -> None:
    payload = notification(alert(namespace="llm", pool=pool, fingerprint="fp"))
    outcomes = []
    for _ in range(4):  # a retry, the HA peer, a group_interval resend, a repeat_interval one
        response = await intake.post(payload)
        assert response.status_code == 200
        outcomes.append(response.json()["accepted"][0]["outcome"])
    assert outcomes == ["started", "signalled", "signalled", "signalled"]
    wid = incident_workflow_id("llm", pool)
    assert await intake.runs(wid, 1) == 1
    # Every resend carries the same dedupe key, so the workflow can ignore the repeats.
    converter = pydantic_data_converter.payload_converter
    keys = {
        (lost.fingerprint, lost.starts_at)
        for payload_ in await signals(intake, wid, SIGNAL_REPLICA_LOST)
        for lost in converter.from_payloads(payload_.payloads, [LostReplica])
    }
    assert len(keys) == 1


async def test_two_replicas_of_one_pool_fold_into_one_incident_and_pools_stay_apart(
    intake: Intake, pool: str
) -> None:
    other = f"{pool}-b"
    response = await intake.post(
        notification(
            alert(namespace="llm", pool=pool, pod=f"{pool}-1", fingerprint="a"),
            alert(namespace="llm", pool=pool, pod=f"{pool}-2", fingerprint="b"),
            alert(namespace="llm", pool=other, pod=f"{other}-1", fingerprint="c"),
        )
    )
    assert response.status_code == 200
    outcomes = {(a["index"], a["outcome"]) for a in response.json()["accepted"]}
    assert outcomes == {(0, "started"), (1, "signalled"), (2, "started")}
    assert len(await signals(intake, incident_workflow_id("llm", pool), SIGNAL_REPLICA_LOST)) == 2
    assert await intake.runs(incident_workflow_id("llm", other), 1) == 1


async def test_a_bad_alert_in_a_batch_is_reported_and_the_good_ones_are_accepted(
    intake: Intake, pool: str
) -> None:
    response = await intake.post(
        notification(
            alert(pool=pool, fingerprint="no-namespace"),
            alert(namespace="llm", pool=pool, fingerprint="good"),
        )
    )
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "partial"
    assert [a["index"] for a in body["accepted"]] == [1]
    assert body["rejected"][0]["field"] == "alerts.0.labels.namespace"
    assert await intake.runs(incident_workflow_id("llm", pool), 1) == 1


async def test_a_batch_of_only_bad_alerts_is_422_and_starts_nothing(
    intake: Intake, pool: str
) -> None:
    response = await intake.post(notification(alert(namespace="Not_A_Namespace", pool=pool)))
    assert response.status_code == 422
    assert response.json()["rejected"][0]["field"] == "alerts.0.labels.namespace"
    assert await intake.absent(incident_workflow_id("Not_A_Namespace", pool))


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (
            {"version": "3", "groupKey": "g", "status": "firing", "receiver": "r", "alerts": []},
            "version",
        ),
        ({"version": "4", "groupKey": "g", "status": "firing", "receiver": "r"}, "alerts"),
        (
            {"version": "4", "groupKey": "g", "status": "firing", "receiver": "r", "alerts": {}},
            "alerts",
        ),
        (
            {"version": "4", "groupKey": "g", "status": "x", "receiver": "r", "alerts": []},
            "status",
        ),
        ([1, 2], "body"),
    ],
)
async def test_a_bad_envelope_is_422_naming_the_field(
    intake: Intake, payload: object, field: str
) -> None:
    response = await intake.post(payload)
    assert response.status_code == 422
    assert response.json()["field"] == field


async def test_a_body_that_is_not_json_is_400(intake: Intake) -> None:
    response = await intake.http.post(
        "/alertmanager", content=b"{nope", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "body is not JSON"


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer", TOKEN])
async def test_without_the_right_credentials_the_answer_is_401_and_nothing_starts(
    intake: Intake, pool: str, header: str | None
) -> None:
    headers = {"Authorization": header} if header is not None else {}
    response = await intake.http.post(
        "/alertmanager",
        json=notification(alert(namespace="llm", pool=pool)),
        headers=headers,
    )
    assert response.status_code == 401
    assert "Bearer" in response.headers["WWW-Authenticate"]
    assert await intake.absent(incident_workflow_id("llm", pool))


async def test_basic_auth_is_accepted_when_configured(
    local_env: WorkflowEnvironment, task_queue: str, pool: str
) -> None:
    settings = load_settings(
        intake_basic_user="alertmanager", intake_basic_password="pw-1", task_queue=task_queue
    )
    app = create_app(settings, client=local_env.client)
    good = base64.b64encode(b"alertmanager:pw-1").decode()
    bad = base64.b64encode(b"alertmanager:pw-2").decode()
    payload = notification(alert(namespace="llm", pool=pool))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://i") as c:
        denied = await c.post(
            "/alertmanager", json=payload, headers={"Authorization": f"Basic {bad}"}
        )
        allowed = await c.post(
            "/alertmanager", json=payload, headers={"Authorization": f"Basic {good}"}
        )
    assert denied.status_code == 401
    assert allowed.status_code == 200


async def test_a_resolved_alert_signals_the_open_incident(intake: Intake, pool: str) -> None:
    await intake.post(notification(alert(namespace="llm", pool=pool, fingerprint="f")))
    response = await intake.post(
        notification(alert(status="resolved", namespace="llm", pool=pool, fingerprint="f"))
    )
    assert response.status_code == 200
    assert response.json()["accepted"][0]["outcome"] == "resolved"
    wid = incident_workflow_id("llm", pool)
    assert len(await signals(intake, wid, SIGNAL_ALERT_RESOLVED)) == 1


async def test_a_resolved_alert_without_an_open_incident_is_recorded_and_starts_nothing(
    intake: Intake, pool: str
) -> None:
    response = await intake.post(notification(alert(status="resolved", namespace="llm", pool=pool)))
    assert response.status_code == 200
    assert response.json()["accepted"][0]["outcome"] == "resolved_without_incident"
    assert await intake.absent(incident_workflow_id("llm", pool))
    metrics = (await intake.get("/metrics")).text
    assert 'fleetmend_intake_alerts_accepted_total{outcome="resolved_without_incident"} 1.0' in (
        metrics
    )


async def test_a_resend_after_the_incident_closed_does_not_reopen_it_but_a_new_alert_does(
    intake: Intake, pool: str
) -> None:
    payload = notification(alert(namespace="llm", pool=pool, fingerprint="f"))
    assert (await intake.post(payload)).status_code == 200
    wid = incident_workflow_id("llm", pool)
    await intake.temporal.get_workflow_handle(wid).terminate("incident closed (test)")

    resend = await intake.post(payload)
    assert resend.status_code == 200
    assert resend.json()["accepted"][0]["outcome"] == "duplicate"
    assert await intake.runs(wid, 1) == 1

    new_loss = await intake.post(
        notification(
            alert(namespace="llm", pool=pool, fingerprint="f", starts_at="2026-11-29T09:30:00Z")
        )
    )
    assert new_loss.json()["accepted"][0]["outcome"] == "started"
    assert await intake.runs(wid, 2) == 2


async def test_the_dry_run_label_starts_a_dry_run_incident(intake: Intake, pool: str) -> None:
    await intake.post(notification(alert(namespace="llm", pool=pool, fleetmend_dry_run="true")))
    history = await intake.temporal.get_workflow_handle(
        incident_workflow_id("llm", pool)
    ).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    incident = pydantic_data_converter.payload_converter.from_payloads(
        started.input.payloads, [IncidentInput]
    )[0]
    assert incident.dry_run is True


async def test_truncated_alerts_are_counted_and_logged(
    intake: Intake, pool: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetmend.intake"):
        response = await intake.post(
            notification(alert(namespace="llm", pool=pool), truncatedAlerts=7)
        )
    assert response.json()["truncated_alerts"] == 7
    assert "truncated 7 alerts" in caplog.text
    assert "fleetmend_intake_truncated_alerts_total 7.0" in (await intake.get("/metrics")).text


async def test_when_temporal_is_unreachable_the_answer_is_503_and_readyz_says_so(
    pool: str, closed_port: int
) -> None:
    settings = load_settings(
        intake_token=TOKEN, temporal_address=f"127.0.0.1:{closed_port}", task_queue="tq-down"
    )
    app = create_app(settings, options=IntakeOptions(temporal_timeout_s=1.0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://i") as c:
        response = await c.post(
            "/alertmanager",
            json=notification(alert(namespace="llm", pool=pool)),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        ready = await c.get("/readyz", headers=AUTH)
        health = await c.get("/healthz")
        metrics = (await c.get("/metrics", headers=AUTH)).text
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    assert ready.status_code == 503
    assert health.status_code == 200
    assert "fleetmend_intake_temporal_unavailable_total 1.0" in metrics


async def test_readyz_is_200_when_temporal_answers(intake: Intake) -> None:
    response = await intake.get("/readyz")
    assert response.status_code == 200
    assert response.json()["temporal"] == "reachable"


async def test_metrics_count_received_accepted_rejected_started_and_latency(
    intake: Intake, pool: str
) -> None:
    await intake.post(
        notification(alert(namespace="llm", pool=pool), alert(pool=pool, fingerprint="x"))
    )
    await intake.post(notification(), token="wrong")
    text = (await intake.get("/metrics")).text
    for line in (
        'fleetmend_intake_alerts_received_total{status="firing"} 2.0',
        'fleetmend_intake_alerts_accepted_total{outcome="started"} 1.0',
        'fleetmend_intake_alerts_rejected_total{reason="missing_namespace"} 1.0',
        'fleetmend_intake_alerts_rejected_total{reason="unauthorised"} 1.0',
        "fleetmend_intake_incidents_started_total 1.0",
        'fleetmend_intake_request_duration_seconds_count{code="200",route="/alertmanager"} 1.0',
    ):
        assert line in text


async def test_the_token_never_appears_in_the_logs(
    intake: Intake, pool: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        await intake.post(notification(alert(namespace="llm", pool=pool)))
        await intake.post(notification(alert(pool=pool)))
        await intake.post(notification(), token=TOKEN + "x")
    assert caplog.records
    assert TOKEN not in caplog.text


def test_the_intake_refuses_to_start_without_credentials() -> None:
    with pytest.raises(ValueError, match="FLEETMEND_INTAKE_TOKEN"):
        create_app(load_settings(intake_token=None))


async def test_two_intake_replicas_racing_on_one_notification_start_one_incident(
    local_env: WorkflowEnvironment, task_queue: str, pool: str
) -> None:
    # An HA Alertmanager pair, each peer's POST landing on a different intake replica.
    settings = load_settings(intake_token=TOKEN, task_queue=task_queue)
    replicas = [create_app(settings, client=local_env.client) for _ in range(2)]
    payload = notification(alert(namespace="llm", pool=pool, fingerprint="ha"))
    clients = [
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://i")
        for app in replicas
    ]
    try:
        responses = await asyncio.gather(
            *(
                c.post("/alertmanager", json=payload, headers={"Authorization": f"Bearer {TOKEN}"})
                for c in clients
                for _ in range(5)
            )
        )
    finally:
        for c in clients:
            await c.aclose()
    assert {r.status_code for r in responses} == {200}
    outcomes = [r.json()["accepted"][0]["outcome"] for r in responses]
    assert outcomes.count("started") == 1
    assert outcomes.count("signalled") == 9
    assert await count_runs(local_env.client, incident_workflow_id("llm", pool), 1) == 1


async def test_when_temporal_dies_after_start_the_intake_answers_503_promptly(
    pool: str,
) -> None:
    own = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary("temporal"),
        dev_server_extra_args=["--log-level", "error"],
        data_converter=pydantic_data_converter,
        ui=False,
    )
    address = own.client.service_client.config.target_host
    settings = load_settings(intake_token=TOKEN, temporal_address=address, task_queue="tq-dies")
    app = create_app(settings, options=IntakeOptions(temporal_timeout_s=1.0))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://i") as c:
        before = await c.post(
            "/alertmanager", json=notification(alert(namespace="llm", pool=pool)), headers=headers
        )
        await own.shutdown()
        started = time.monotonic()
        after = await c.post(
            "/alertmanager",
            json=notification(alert(namespace="llm", pool=f"{pool}-2")),
            headers=headers,
        )
        took = time.monotonic() - started
        ready = await c.get("/readyz", headers=AUTH)
    assert before.status_code == 200
    assert after.status_code == 503
    assert took < 10, took
    assert ready.status_code == 503


async def test_an_oversized_alert_is_rejected_alone_and_its_batch_delivered(
    intake: Intake, pool: str
) -> None:
    huge = alert(namespace="llm", pool=f"{pool}-x", blob="x" * 70_000)
    response = await intake.post(notification(huge, alert(namespace="llm", pool=pool)))
    assert response.status_code == 200
    body = response.json()
    assert [(r["field"], r["reason"]) for r in body["rejected"]] == [
        ("alerts.0.labels", "too_large")
    ]
    assert body["accepted"][0]["outcome"] == "started"


async def test_a_temporal_namespace_that_does_not_exist_is_503_so_alerts_are_kept(
    local_env: WorkflowEnvironment, pool: str
) -> None:
    settings = load_settings(
        intake_token=TOKEN,
        temporal_address=local_env.client.service_client.config.target_host,
        temporal_namespace="no-such-namespace",
    )
    app = create_app(settings, options=IntakeOptions(temporal_timeout_s=2.0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://i") as c:
        response = await c.post(
            "/alertmanager",
            json=notification(alert(namespace="llm", pool=pool)),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        resolved = await c.post(
            "/alertmanager",
            json=notification(alert(status="resolved", namespace="llm", pool=pool)),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert response.status_code == 503
    assert "NOT_FOUND" in response.json()["detail"]
    # Not mistaken for "no open incident": the resolution is retried too.
    assert resolved.status_code == 503
