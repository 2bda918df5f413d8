"""An Alertmanager group of 1,000 alerts: each accepted or rejected, none lost, truncation told.

Against the real Temporal dev server (no worker: the starts and signals are what the
intake owes). deploy/alertmanager.yml groups by (namespace, pool); the intake must cope
with a group spanning pools too, so the big group here spans three.
"""

from __future__ import annotations

import logging

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.intake.conftest import Intake, alert, notification
from worker.alerts import MAX_ALERTS_PER_REQUEST
from workflows.types import SIGNAL_REPLICA_LOST, LostReplica, incident_workflow_id

TRUNCATED = 250  # what Alertmanager left out with max_alerts set


async def delivered_fingerprints(intake: Intake, workflow_id: str) -> set[str]:
    """Fingerprints of every loss signalled to the incident (its start signal included)."""
    converter = pydantic_data_converter.payload_converter
    keys = set()
    handle = intake.temporal.get_workflow_handle(workflow_id)
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name == SIGNAL_REPLICA_LOST:
                loss = converter.from_payloads(attrs.input.payloads, [LostReplica])[0]
                keys.add(loss.fingerprint)
    return keys


def big_group(pools: list[str], size: int) -> tuple[list[dict], set[int]]:
    """`size` alerts over `pools`, every tenth one bad in a different way; the bad indexes."""
    alerts, bad = [], set()
    for i in range(size):
        pool = pools[i % len(pools)]
        if i % 10 == 3:
            alerts.append(alert(pool=pool, pod=f"{pool}-{i}", fingerprint=f"f{i}"))  # no namespace
            bad.add(i)
        elif i % 10 == 7:
            alerts.append(alert(namespace="llm", pool=pool, pod=f"../{i}", fingerprint=f"f{i}"))
            bad.add(i)
        else:
            alerts.append(alert(namespace="llm", pool=pool, pod=f"{pool}-{i}", fingerprint=f"f{i}"))
    return alerts, bad


async def test_a_group_of_1000_alerts_is_answered_alert_by_alert_with_one_incident_per_pool(
    intake: Intake, pool: str, caplog: pytest.LogCaptureFixture
) -> None:
    pools = [f"{pool}-a", f"{pool}-b", f"{pool}-c"]
    alerts, bad = big_group(pools, 1000)

    with caplog.at_level(logging.WARNING, logger="fleetmend.intake"):
        response = await intake.post(notification(*alerts, truncatedAlerts=TRUNCATED))

    assert response.status_code == 200
    body = response.json()
    accepted = {a["index"]: a for a in body["accepted"]}
    rejected = {r["index"]: r for r in body["rejected"]}
    # Every alert is answered exactly once, as accepted or as rejected with its field.
    assert len(body["accepted"]) + len(body["rejected"]) == 1000
    assert set(accepted) | set(rejected) == set(range(1000))
    assert set(rejected) == bad
    assert {r["field"] for i, r in rejected.items() if i % 10 == 3} == {
        f"alerts.{i}.labels.namespace" for i in bad if i % 10 == 3
    }
    assert {r["reason"] for i, r in rejected.items() if i % 10 == 7} == {"bad_pod"}
    # One incident per pool; every accepted alert reached its pool's incident.
    outcomes = [a["outcome"] for a in body["accepted"]]
    assert outcomes.count("started") == len(pools)
    for name in pools:
        wid = incident_workflow_id("llm", name)
        assert await intake.runs(wid, 1) == 1
        wanted = {a["dedupe_key"].partition("@")[0] for a in body["accepted"]
                  if a["workflow_id"] == wid}  # fmt: skip
        assert len(wanted) == len([i for i in accepted if i % len(pools) == pools.index(name)])
        assert await delivered_fingerprints(intake, wid) == wanted
    # Truncation is reported in the answer, the log and the metrics.
    assert body["truncated_alerts"] == TRUNCATED
    assert f"truncated {TRUNCATED} alerts" in caplog.text
    metrics = (await intake.get("/metrics")).text
    assert f"fleetmend_intake_truncated_alerts_total {TRUNCATED}.0" in metrics


async def test_alerts_past_the_per_notification_bound_are_rejected_one_by_one(
    intake: Intake, pool: str
) -> None:
    extra = 5
    alerts = [
        alert(namespace="llm", pool=pool, pod=f"{pool}-{i}", fingerprint=f"g{i}")
        for i in range(MAX_ALERTS_PER_REQUEST + extra)
    ]

    response = await intake.post(notification(*alerts))

    assert response.status_code == 200
    body = response.json()
    assert len(body["accepted"]) == MAX_ALERTS_PER_REQUEST
    assert [r["index"] for r in body["rejected"]] == list(
        range(MAX_ALERTS_PER_REQUEST, MAX_ALERTS_PER_REQUEST + extra)
    )
    assert {r["reason"] for r in body["rejected"]} == {"over_limit"}
    assert "max_alerts" in body["rejected"][0]["message"]
    assert await intake.runs(incident_workflow_id("llm", pool), 1) == 1
