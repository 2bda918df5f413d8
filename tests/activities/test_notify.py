"""Notify: Slack-compatible JSON with numbers, posted once per operation id."""

from __future__ import annotations

import json

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.effects import EffectRunner
from activities.notify import Fact, NotifyActivities, NotifyInput, lead_time_facts


class Channel:
    """An in-process incident channel: records what was posted, answers `status`."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.posts: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.posts.append(request)
        return httpx.Response(self.status, text="ok")

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


def test_the_lead_time_is_posted_as_a_number_once_per_operation(runner: EffectRunner) -> None:
    channel = Channel()
    acts = NotifyActivities(channel.client(), "https://hooks.example/incident", runner)
    op = NotifyInput(
        op_id="i/notify/lead-time",
        incident_id="i",
        title="serving/llm: no warm capacity, provisioning",
        facts=lead_time_facts(840.0, "observed", samples=6, warm_floor=0),
    )

    first = ActivityEnvironment().run(acts.notify_incident_channel, op)
    again = ActivityEnvironment().run(acts.notify_incident_channel, op)

    assert first.delivered and first.status_code == 200 and first.applied_now
    assert not again.applied_now
    assert len(channel.posts) == 1
    # The receiver's 2xx confirms the message, so reconciliation finds no orphan.
    record = runner.ledger.get(op.op_id)
    assert record is not None and record.state == "confirmed"
    posted = channel.posts[0]
    assert posted.headers["Idempotency-Key"] == op.op_id
    body = json.loads(posted.content)
    assert "provisioning lead time: 840 s" in body["text"]
    facts = {f["name"]: f for f in body["fleetmend"]["facts"]}
    assert facts["provisioning lead time"] == {
        "name": "provisioning lead time",
        "value": 840.0,
        "unit": "s",
    }
    assert facts["lead time minutes"]["value"] == 14.0
    assert body["blocks"][0]["type"] == "header"
    assert any(
        field["text"] == "*warm replicas available*\n0"
        for block in body["blocks"][1:]
        for field in block.get("fields", [])
    )


def test_more_than_ten_facts_are_split_into_slack_sized_sections(runner: EffectRunner) -> None:
    channel = Channel()
    facts = [Fact(name=f"replica {i} waiting", value=i, unit="requests") for i in range(12)]
    result = ActivityEnvironment().run(
        NotifyActivities(
            channel.client(), "https://hooks.example/x", runner
        ).notify_incident_channel,
        NotifyInput(op_id="i/notify/pressure", incident_id="i", title="pressure", facts=facts),
    )
    sections = [b for b in result.body["blocks"] if b["type"] == "section"]
    assert [len(s["fields"]) for s in sections] == [10, 2]


@pytest.mark.parametrize(
    ("status", "retryable"), [(400, False), (404, False), (429, True), (503, True)]
)
def test_a_webhook_refusal_is_permanent_and_an_outage_is_retried(
    runner: EffectRunner, status: int, retryable: bool
) -> None:
    channel = Channel(status)
    with pytest.raises(ApplicationError) as failed:
        ActivityEnvironment().run(
            NotifyActivities(
                channel.client(), "https://hooks.example/x", runner
            ).notify_incident_channel,
            NotifyInput(op_id=f"i/notify/{status}", incident_id="i", title="t"),
        )
    assert failed.value.non_retryable is (not retryable)
    assert str(status) in str(failed.value)


def test_without_a_configured_channel_the_message_is_returned_not_posted(
    runner: EffectRunner,
) -> None:
    result = ActivityEnvironment().run(
        NotifyActivities(httpx.Client(), None, runner).notify_incident_channel,
        NotifyInput(
            op_id="i/notify/none", incident_id="i", title="t", facts=[Fact(name="lost", value=1)]
        ),
    )
    assert not result.delivered and result.skipped_reason
    assert "• lost: 1" in result.body["text"]
    assert runner.ledger.get("i/notify/none") is None
