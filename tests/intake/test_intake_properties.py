"""Thousands of generated and mutated payloads against a real `fleetmend intake` process.

Three sources, all sent over HTTP to the intake running as its own process (uvicorn, the
same command a Deployment runs), backed by the real Temporal dev server:

- schemathesis, positive: bodies valid against the served OpenAPI document;
- schemathesis, negative: bodies and types that break it;
- realistic Alertmanager notifications, then mutated (keys dropped, values swapped for
  arbitrary JSON, labels that are not Kubernetes names, duplicates, unknown keys).

Properties: no 5xx while Temporal is up; every answer is one the document declares; every
workflow in Temporal came from an alert the test itself judges valid; the process is still
up and healthy at the end. With Temporal down, the only 5xx is 503.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import pytest
import pytest_asyncio
import schemathesis
from hypothesis import HealthCheck, given, settings, strategies as st
from schemathesis import GenerationMode
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests.intake.conftest import (
    AUTH,
    TOKEN,
    IntakeProcess,
    alert,
    notification,
    start_intake_process,
    stop_intake_process,
)
from worker.intake_openapi import openapi_document
from workflows.types import SIGNAL_REPLICA_LOST, LostReplica

EXAMPLES_PER_SOURCE = 700  # three sources: at least 2,000 requests in all
DECLARED = {200, 400, 401, 413, 422, 503}
_NS = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass
class Sent:
    body: Any
    status: int
    answer: Any


@dataclass
class Ledger:
    """What the test sent and what came back; the oracle reads it, not the intake's code."""

    sent: list[Sent] = field(default_factory=list)

    def statuses(self) -> set[int]:
        return {s.status for s in self.sent}


@pytest_asyncio.fixture
async def intake_up(local_env: WorkflowEnvironment) -> AsyncIterator[IntakeProcess]:
    task_queue = f"tq-fuzz-{uuid.uuid4().hex[:8]}"
    intake = await start_intake_process(
        {
            "FLEETMEND_TEMPORAL_ADDRESS": local_env.client.service_client.config.target_host,
            "FLEETMEND_TASK_QUEUE": task_queue,
        }
    )
    yield intake
    await stop_intake_process(intake)


# ------------------------------------------------------------------ strategies

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.sampled_from(["llm", "serving", "team-a", "LLM", "a_b", "", "x" * 70, "ns.dot", "ü"])
pools = st.sampled_from(["llama-70b", "mixtral", "p", "Pool", "a/b", "", "-bad", "ok.name"])
label_keys = st.sampled_from(
    ["namespace", "pool", "service", "deployment", "leaderworkerset", "pod", "node", "instance"]
)
faults = st.sampled_from(["gpu-xid", "gpu-ecc", "node-not-ready", "meteor", ""])
times = st.sampled_from(
    ["2026-11-29T08:00:00Z", "2026-11-29T08:00:00.123456789Z", "0001-01-01T00:00:00Z", "yesterday"]
)


@st.composite
def realistic_alert(draw: st.DrawFn) -> dict[str, Any]:
    labels: dict[str, Any] = {
        "alertname": draw(st.sampled_from(["KubeNodeNotReady", "GPUXidError", "X"]))
    }
    if draw(st.booleans()) or draw(st.booleans()):
        labels["namespace"] = draw(names)
    labels[draw(st.sampled_from(["pool", "service", "deployment", "leaderworkerset"]))] = draw(
        pools
    )
    for key in draw(st.lists(label_keys, max_size=3)):
        labels[key] = draw(pools | st.text(max_size=12))
    if draw(st.booleans()):
        labels["fault"] = draw(faults)
    if draw(st.booleans()):
        labels["fleetmend_dry_run"] = draw(st.sampled_from(["true", "false", "TRUE"]))
    return {
        "status": draw(st.sampled_from(["firing", "firing", "resolved", "pending"])),
        "labels": labels,
        "annotations": {"summary": draw(st.text(max_size=20))},
        "startsAt": draw(times),
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": draw(st.text(alphabet="0123456789abcdef", min_size=0, max_size=16)),
    }


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


def _mutate(body: Any, path: tuple[Any, ...], how: str, new: Any) -> Any:
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if how == "drop":
        if isinstance(parent, dict):
            parent.pop(last, None)
        else:
            parent.pop(last)
    else:
        parent[last] = new
    return body


@st.composite
def mutated_notification(draw: st.DrawFn) -> Any:
    alerts = draw(st.lists(realistic_alert(), min_size=1, max_size=5))
    if draw(st.booleans()):
        alerts.append(json.loads(json.dumps(alerts[0])))  # a duplicate within the batch
    body: dict[str, Any] = {
        "version": "4",
        "groupKey": '{}:{alertname=~".*"}',
        "truncatedAlerts": draw(st.integers(0, 3)),
        "status": "firing",
        "receiver": "fleetmend",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager",
        "alerts": alerts,
        "routeLabels": {"team": "serving"},
    }
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(body)
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["drop", "replace"]))
        body = _mutate(body, path, how, draw(json_values))
    if draw(st.integers(0, 20)) == 0:
        return draw(json_values)  # not even an object, now and then
    return body


# ------------------------------------------------------------------ the oracle


def judged_valid(raw: Any) -> tuple[str, str] | None:
    """The test's own reading of a firing alert: (namespace, pool), or None if invalid.

    Deliberately written apart from worker/alerts.py: if the intake accepted something this
    rejects, one of the two is wrong and the test says so.
    """
    if not isinstance(raw, dict) or raw.get("status") != "firing":
        return None
    labels = raw.get("labels")
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        return None
    starts = raw.get("startsAt")
    if not isinstance(starts, str) or "T" not in starts.upper():
        return None
    try:
        parsed = datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", starts.upper()))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    namespace = labels.get("namespace", "").strip()
    pool = next(
        (
            labels[k].strip()
            for k in ("pool", "service", "deployment", "leaderworkerset")
            if labels.get(k, "").strip()
        ),
        "",
    )
    if not _NS.match(namespace) or not _NAME.match(pool):
        return None
    return namespace, pool


def send_all(url: str, bodies: list[Any], ledger: Ledger) -> None:
    with httpx.Client(base_url=url, timeout=30) as http:
        for body in bodies:
            if isinstance(body, bytes):
                content = body
            else:
                try:
                    content = json.dumps(body).encode()
                except (TypeError, ValueError):
                    content = repr(body).encode()
            response = http.post(
                "/alertmanager",
                content=content,
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            )
            try:
                answer = response.json()
            except ValueError:
                answer = None
            ledger.sent.append(Sent(body, response.status_code, answer))


def generate(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    out: list[Any] = []

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        out.append(value)

    collect()
    return out


def schemathesis_bodies(mode: GenerationMode, count: int) -> list[Any]:
    operation = schemathesis.openapi.from_dict(openapi_document())["/alertmanager"]["POST"]
    cases = generate(operation.as_strategy(mode), count)
    return [case.body for case in cases]


# ------------------------------------------------------------------ the tests


async def test_thousands_of_generated_payloads_never_get_a_5xx_nor_start_a_bad_incident(
    intake_up: IntakeProcess, local_env: WorkflowEnvironment
) -> None:
    ledger = Ledger()

    # Generated on the main thread: schemathesis and hypothesis import modules lazily, and
    # CPython 3.11 can fail compiling one on a worker thread ("AST constructor recursion
    # depth mismatch"). Only the sending, which blocks, goes to a thread.
    bodies = (
        schemathesis_bodies(GenerationMode.POSITIVE, EXAMPLES_PER_SOURCE)
        + schemathesis_bodies(GenerationMode.NEGATIVE, EXAMPLES_PER_SOURCE)
        + generate(mutated_notification(), EXAMPLES_PER_SOURCE)
    )
    await asyncio.to_thread(send_all, intake_up.url, bodies, ledger)

    assert len(ledger.sent) >= 2000
    assert ledger.statuses() <= DECLARED - {503}, ledger.statuses()
    # The mix exercised every branch: accepted, partially accepted, rejected, not JSON.
    assert {200, 422}.issubset(ledger.statuses())
    assert any(s.answer and s.answer.get("status") == "partial" for s in ledger.sent)
    assert any(
        a["outcome"] == "started"
        for s in ledger.sent
        if s.status == 200
        for a in s.answer["accepted"]
    )

    # Every alert the intake said it accepted as a loss is one the oracle judges valid.
    valid_keys: set[tuple[str, str]] = set()
    for s in ledger.sent:
        if s.status != 200:
            continue
        for accepted in s.answer["accepted"]:
            raw = s.body["alerts"][accepted["index"]]
            if accepted["outcome"] in ("started", "signalled"):
                judged = judged_valid(raw)
                assert judged is not None, raw
                valid_keys.add(judged)

    # And Temporal holds no incident that did not come from such an alert.
    client = local_env.client
    query = f"TaskQueue = '{intake_up.task_queue}'"
    workflows: list[Any] = []
    for _ in range(20):  # visibility is eventually consistent: read until it settles
        previous = len(workflows)
        workflows = [wf async for wf in client.list_workflows(query)]
        if workflows and len(workflows) == previous:
            break
        await asyncio.sleep(0.5)
    assert workflows, "the mutated realistic payloads should have started incidents"
    converter = pydantic_data_converter.payload_converter
    for wf in workflows:
        namespace, pool = wf.id.removeprefix("replica-loss/").split("/", 1)
        assert (namespace, pool) in valid_keys
        async for event in client.get_workflow_handle(
            wf.id, run_id=wf.run_id
        ).fetch_history_events():
            if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                continue
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name == SIGNAL_REPLICA_LOST:
                lost = converter.from_payloads(attrs.input.payloads, [LostReplica])[0]
                assert (lost.namespace, lost.pool) == (namespace, pool)

    # The process is still up and healthy.
    assert intake_up.proc.returncode is None
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{intake_up.url}/healthz")).status_code == 200
        metrics = (await http.get(f"{intake_up.url}/metrics", headers=AUTH)).text
    assert 'route="/alertmanager"' in metrics


async def test_with_temporal_down_the_only_5xx_is_503(closed_port: int) -> None:
    intake = await start_intake_process(
        {
            "FLEETMEND_TEMPORAL_ADDRESS": f"127.0.0.1:{closed_port}",
            "FLEETMEND_INTAKE_TEMPORAL_TIMEOUT_S": "0.5",
        }
    )
    ledger = Ledger()
    try:
        bodies = generate(mutated_notification(), 80)
        # Plus batches known to be good, so the 503 path is certainly taken.
        bodies += [notification(alert(namespace="llm", pool=f"p{i}")) for i in range(5)]
        await asyncio.to_thread(send_all, intake.url, bodies, ledger)
        assert intake.proc.returncode is None
    finally:
        await stop_intake_process(intake)
    assert ledger.statuses() <= DECLARED
    assert {s.status for s in ledger.sent if s.status >= 500} == {503}
    # A batch with a valid firing alert is never answered 2xx while Temporal is down.
    for s in ledger.sent:
        alerts = s.body.get("alerts") if isinstance(s.body, dict) else None
        if isinstance(alerts, list) and any(judged_valid(a) for a in alerts) and s.status == 200:
            pytest.fail(f"2xx without Temporal for {s.body}")


async def test_generated_action_proposals_never_get_a_5xx_and_execute_at_most_once(
    local_env: WorkflowEnvironment, database_url: str
) -> None:
    from worker.settings import load_settings

    intake = await start_intake_process(
        {
            "FLEETMEND_TEMPORAL_ADDRESS": local_env.client.service_client.config.target_host,
            "FLEETMEND_DATABASE_URL": load_settings(database_url=database_url).database_url or "",
        }
    )
    operation = schemathesis.openapi.from_dict(openapi_document())["/actions"]["POST"]
    executed: dict[str, int] = {}
    statuses: set[int] = set()

    # Generated on the main thread (see the first test); only the sending blocks a thread.
    bodies = [
        case.body
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        for case in generate(operation.as_strategy(mode), 250)
    ]
    # Plus proposals known to be valid, so the execute-once path is certainly taken whatever
    # the generator drew (it can draw 250 bodies the ledger refuses).
    bodies += [
        {"op_id": f"known/{i}", "kind": "send-email", "target": f"c/{i}", "intent": {"n": i}}
        for i in range(5)
    ]

    def run() -> None:
        with httpx.Client(base_url=intake.url, timeout=30) as http:
            headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            for body in bodies:
                content = body if isinstance(body, bytes) else json.dumps(body).encode()
                for _ in range(2):  # every proposal twice: the retry must not execute again
                    response = http.post("/actions", content=content, headers=headers)
                    statuses.add(response.status_code)
                    if response.status_code == 200 and response.json()["decision"] == "execute":
                        op_id = response.json()["op_id"]
                        executed[op_id] = executed.get(op_id, 0) + 1

    try:
        await asyncio.to_thread(run)
        assert intake.proc.returncode is None
    finally:
        await stop_intake_process(intake)
    assert all(code < 500 for code in statuses), statuses
    assert 200 in statuses and 422 in statuses
    assert executed, "some generated proposals should have been valid"
    assert set(executed.values()) == {1}
