"""The drill channel that holds a message's first POST: unread (drop) or its reply (lose-reply)."""

from __future__ import annotations

import asyncio

import httpx

from tests.faults.held_channel import HeldChannel


async def post(http: httpx.AsyncClient, channel: HeldChannel, key: str) -> int:
    body = {"text": key, "fleetmend": {"op_id": key}}
    response = await http.post(channel.path, json=body, headers={"Idempotency-Key": key})
    return response.status_code


async def test_a_dropped_post_is_never_read_and_a_lost_reply_was_delivered_first() -> None:
    channel = HeldChannel(["drop", "lose-reply"])
    transport = httpx.ASGITransport(app=channel.app())
    async with httpx.AsyncClient(transport=transport, base_url="http://channel") as http:
        dropped = asyncio.create_task(post(http, channel, "i/notify/severity"))
        while channel.arrived(0) is None:
            await asyncio.sleep(0)
        lost = asyncio.create_task(post(http, channel, "i/notify/recovered"))
        while channel.arrived(1) is None:
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert not dropped.done() and not lost.done()
        assert channel.receipts == ["i/notify/recovered"]
        channel.release()
        assert (await dropped, await lost) == (503, 200)
        # Retries of held messages, and any message after the planned ones, pass at once.
        assert await post(http, channel, "i/notify/severity") == 200
        assert await post(http, channel, "i/notify/recovered") == 200
        assert await post(http, channel, "i/notify/other") == 200
    assert [p.mode for p in channel.held] == ["drop", "lose-reply"]
    assert channel.receipts == [
        "i/notify/recovered",
        "i/notify/severity",
        "i/notify/recovered",
        "i/notify/other",
    ]
    assert [n.milestone for n in channel.received] == ["recovered", "severity", "other"]
