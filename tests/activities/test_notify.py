"""Notify: Slack-compatible JSON with numbers, posted once per operation id."""

from __future__ import annotations

import json

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.effects import EffectRunner, OperationSpec
from activities.notify import Fact, NotifyActivities, NotifyInput, lead_time_facts

from .test_a_retry_after_a_worker_died_mid_write import DiesAfterWriting, WorkerDied


class Channel:
    """An in-process incident channel: records what was posted, answers `status`, or
    `statuses` in turn (the last one from then on)."""

    def __init__(self, status: int = 200, *, statuses: list[int] | None = None) -> None:
        self.statuses = statuses or [status]
        self.posts: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.posts.append(request)
        status = self.statuses[min(len(self.posts), len(self.statuses)) - 1]
        return httpx.Response(status, text="ok")

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
    # The channel's 2xx is the confirmation: a delivered message is no orphan.
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


def test_a_post_the_channel_refused_is_posted_again_by_the_retry_and_delivered(
    runner: EffectRunner,
) -> None:
    channel = Channel(statuses=[503, 200])
    acts = NotifyActivities(channel.client(), "https://hooks.example/x", runner)
    op = NotifyInput(op_id="i/notify/outage", incident_id="i", title="t")
    with pytest.raises(ApplicationError):
        ActivityEnvironment().run(acts.notify_incident_channel, op)

    retried = ActivityEnvironment().run(acts.notify_incident_channel, op)

    # The retry has no 2xx to show for the first post: it must not call it delivered.
    assert (retried.delivered, retried.status_code, retried.applied_now) == (True, 200, True)
    assert [p.headers["Idempotency-Key"] for p in channel.posts] == [op.op_id] * 2
    record = runner.ledger.get(op.op_id)
    assert record is not None and record.state == "confirmed"


def test_a_retry_after_the_worker_died_mid_post_posts_again_under_the_same_key(
    runner: EffectRunner,
) -> None:
    channel = Channel()
    op = NotifyInput(op_id="i/notify/severity", incident_id="i", title="t")
    url = "https://hooks.example/x"
    with pytest.raises(WorkerDied):
        ActivityEnvironment().run(
            NotifyActivities(
                channel.client(), url, DiesAfterWriting(runner)
            ).notify_incident_channel,
            op,
        )

    retried = ActivityEnvironment().run(
        NotifyActivities(channel.client(), url, runner).notify_incident_channel, op
    )

    # At least once, never lost: a receiver that dedupes on the key shows it once.
    assert retried.delivered and retried.applied_now
    assert [p.headers["Idempotency-Key"] for p in channel.posts] == [op.op_id] * 2
    assert len({p.content for p in channel.posts}) == 1


def test_a_retry_after_the_2xx_was_recorded_confirms_it_without_posting_again(
    runner: EffectRunner,
) -> None:
    channel = Channel()
    op = NotifyInput(op_id="i/notify/recorded", incident_id="i", title="t")
    # The dead attempt got its 2xx and the ledger recorded it applied; confirm never ran.
    spec = OperationSpec(
        op_id=op.op_id,
        incident_id="i",
        kind="notify",
        target="webhook/incident-channel",
        intent={"title": "t", "facts": []},
    )
    runner.ledger.run_once(spec, lambda _: {"status_code": 200})

    retried = ActivityEnvironment().run(
        NotifyActivities(
            channel.client(), "https://hooks.example/x", runner
        ).notify_incident_channel,
        op,
    )

    assert channel.posts == []
    assert (retried.delivered, retried.status_code, retried.applied_now) == (True, 200, False)
    record = runner.ledger.get(op.op_id)
    assert record is not None and record.state == "confirmed"
