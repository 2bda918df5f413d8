"""The drill's incident channel keeps what fleetmend posted, read back as facts."""

from __future__ import annotations

import httpx

from activities.notify import Fact, NotifyInput, message_body
from worker.drill_channel import PATH, IncidentChannel, notification_of


async def test_a_posted_notification_keeps_its_title_text_and_numeric_facts() -> None:
    channel = IncidentChannel()
    body = message_body(
        NotifyInput(
            op_id="i/notify/lead-time",
            incident_id="i",
            title="serving/llm: no warm capacity; recovery is 10 minutes out",
            facts=[Fact(name="provisioning lead time", value=600, unit="s")],
        )
    )
    transport = httpx.ASGITransport(app=channel.app())
    async with httpx.AsyncClient(transport=transport, base_url="http://channel") as http:
        assert (await http.post(channel.path, json=body)).status_code == 200
        assert (await http.post(channel.path, content=b"not json")).status_code == 400
        # Without the URL's secret the channel takes nothing.
        assert (await http.post(f"{PATH}/guess", json=body)).status_code == 404
    (received,) = channel.received
    assert received.milestone == "lead-time"
    assert "10 minutes out" in received.title and "600 s" in received.text
    assert received.fact("provisioning lead time") == 600
    assert received.fact("no such fact") is None


def test_a_body_that_is_not_an_object_is_kept_as_text() -> None:
    assert notification_of(["x"]).text == "['x']"
    assert notification_of({"text": "t", "fleetmend": "odd"}).facts == []


async def test_a_repeat_under_the_same_idempotency_key_is_counted_but_kept_once() -> None:
    channel = IncidentChannel()
    body = message_body(NotifyInput(op_id="i/notify/severity", incident_id="i", title="t"))
    transport = httpx.ASGITransport(app=channel.app())
    async with httpx.AsyncClient(transport=transport, base_url="http://channel") as http:
        for key in ("i/notify/severity", "i/notify/severity", "i/notify/other"):
            response = await http.post(channel.path, json=body, headers={"Idempotency-Key": key})
            assert response.status_code == 200
    assert channel.receipts == ["i/notify/severity", "i/notify/severity", "i/notify/other"]
    assert len(channel.received) == 2
