"""A readiness probe answers within its timeout, and its request never outlives it.

The last rule is what keeps a stopped pod's probe from failing later on a closed
connection with nobody to read it: asyncio then logs the error from the garbage
collector, in the middle of whatever code is running (on CPython 3.11, once, in the
middle of pytest compiling a module, which failed the compile).
"""

from __future__ import annotations

import asyncio

import httpx

from fleetsim.clock import ManualClock
from fleetsim.kubelet import probe_within


def answer(status: int) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("GET", "http://10.0.0.1/health"))


async def test_a_probe_answered_in_time_returns_the_answer() -> None:
    async def request() -> httpx.Response:
        return answer(200)

    response = await probe_within(request(), ManualClock(), min_wall_s=0.0)

    assert response is not None and response.status_code == 200


async def test_a_probe_that_fails_on_the_wire_reads_as_no_answer() -> None:
    async def request() -> httpx.Response:
        raise httpx.ReadError("connection reset")

    assert await probe_within(request(), ManualClock(), min_wall_s=0.0) is None


async def test_a_probe_past_its_timeout_reads_as_no_answer_and_its_request_is_cancelled() -> None:
    clock = ManualClock()
    hung = asyncio.Event()
    cancelled = asyncio.Event()

    async def request() -> httpx.Response:
        hung.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    probe = asyncio.create_task(probe_within(request(), clock, timeout_s=1.0, min_wall_s=0.0))
    await hung.wait()
    await clock.advance(1.0)

    assert await probe is None
    await asyncio.sleep(0)
    assert cancelled.is_set()


async def test_a_probe_cancelled_mid_flight_cancels_its_request() -> None:
    hung = asyncio.Event()
    request_task: list[asyncio.Task[object]] = []

    async def request() -> httpx.Response:
        current = asyncio.current_task()
        assert current is not None
        request_task.append(current)
        hung.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    probe = asyncio.create_task(probe_within(request(), ManualClock(), min_wall_s=0.0))
    await hung.wait()
    probe.cancel()
    await asyncio.gather(probe, return_exceptions=True)
    await asyncio.sleep(0)

    assert request_task[0].cancelled(), "the request outlived the probe that sent it"
