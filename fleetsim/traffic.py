"""Open-loop request arrivals into the router, one stream per scenario `traffic` entry.

Started by `Fleet` for each `Traffic` in the scenario. Arrivals are a seeded Poisson
process in simulated time at `rate * surge` requests/s (the demand-surge fault raises
`surge` for a while), so the same scenario produces the same arrival pattern. Each
request is its own task: arrivals do not wait for completions, as real callers do not.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from fleetsim.clock import Clock
from fleetsim.router import Router, TrafficRequest
from fleetsim.scenario import Traffic

# Arrivals due within this are released at once, so high rates on a fast clock do not
# cost one timer per request.
_MIN_TICK_S = 0.01
# Fleet seconds an arrival may be released late; beyond, the fleet is not keeping up with
# its clock, and catching up would only push every later arrival further behind.
_MAX_CATCH_UP_S = 2.0


@dataclass
class Surge:
    factor: float
    until: float


class TrafficGenerator:
    def __init__(self, spec: Traffic, router: Router, clock: Clock, *, seed: int = 0) -> None:
        self.spec = spec
        self.router = router
        self.clock = clock
        self._random = random.Random(seed)
        self._surges: list[Surge] = []
        self._tasks: set[asyncio.Task[str]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._seq = 0
        # How far behind its schedule an arrival was released, at worst.
        self.max_lag_s = 0.0
        # Arrivals never released because they were overdue by more than _MAX_CATCH_UP_S.
        self.dropped = 0
        self.name = f"{spec.namespace}/{spec.pool}"

    def surge(self, factor: float, duration_s: float | None) -> None:
        until = self.clock.now() + duration_s if duration_s else float("inf")
        self._surges.append(Surge(factor, until))

    def rate(self) -> float:
        now = self.clock.now()
        self._surges = [s for s in self._surges if s.until > now]
        factor = 1.0
        for s in self._surges:
            factor *= s.factor
        return self.spec.rate * factor

    def start(self) -> None:
        if self._runner is None:
            self._runner = asyncio.create_task(self._run(), name=f"traffic {self.name}")

    async def stop(self, *, drain: bool = False) -> None:
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = None
        if drain:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self) -> None:
        # `arrivals: exact` keeps arrival times on an absolute schedule: a sleep that
        # overruns (a busy event loop, a fast clock) delays the next arrivals but does not
        # drop them, so the offered rate is the scenario's. A process that cannot keep up
        # at all would only fall further behind: arrivals overdue by more than
        # `_MAX_CATCH_UP_S` are dropped and counted, so the shortfall shows.
        next_at = self.clock.now()
        while True:
            next_at += self._random.expovariate(self.rate())
            delay = next_at - self.clock.now()
            if delay >= _MIN_TICK_S:
                await self.clock.sleep(delay)
                if self.spec.arrivals == "paced":
                    # The scenario asked for the old pacing: the overrun is lost.
                    next_at = max(next_at, self.clock.now())
            elif -delay > _MAX_CATCH_UP_S:
                self.dropped += 1
                continue
            else:
                self.max_lag_s = max(self.max_lag_s, -delay)
            self._fire(next_at)

    def _fire(self, arrived_at: float) -> None:
        self._seq += 1
        spec = self.spec
        rnd = self._random
        req = TrafficRequest(
            id=f"{spec.pool}-{self._seq}",
            namespace=spec.namespace,
            service=spec.pool,
            stream=rnd.random() < spec.stream_fraction,
            priority="low" if rnd.random() < 0.5 else "high",
            action_id=f"{spec.pool}/req-{self._seq}/action"
            if rnd.random() < spec.action_fraction
            else None,
            deadline_s=spec.deadline_s,
            timeout_s=spec.request_timeout_s,
            # The schedule, not the release: arrivals released together after a stall
            # were offered apart, and the engines queue them as offered.
            arrived_at=arrived_at,
        )
        task = asyncio.create_task(self.router.handle(req))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
