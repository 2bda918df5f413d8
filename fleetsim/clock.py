"""The fleet's clock: wall time for drills and the demo, scaled or manual time for tests.

Called from every fleetsim component that waits or timestamps (controllers, replicas,
traffic, faults). Nothing in fleetsim reads `time` directly, so a test can run a
ten-minute warm-up in a second (ScaledClock) or step it exactly (ManualClock).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Seconds of simulated time since the fleet started, and a way to wait for them."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class ScaledClock:
    """Simulated time runs `speed` times faster than the wall clock (speed=1: wall time)."""

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError(f"clock speed must be > 0, got {speed}")
        self.speed = speed
        self._t0 = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self.speed

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds) / self.speed)

    def to_wall(self, seconds: float) -> float:
        """Wall-clock seconds that `seconds` of simulated time take."""
        return seconds / self.speed


class WallClock(ScaledClock):
    def __init__(self) -> None:
        super().__init__(1.0)


class ManualClock:
    """Time moves only when a test calls `advance`; sleepers wake in deadline order."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + seconds, fut))
        await fut

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking each sleeper whose deadline passed, in order."""
        target = self._now + seconds
        while True:
            due = sorted(
                ((d, f) for d, f in self._sleepers if d <= target and not f.done()),
                key=lambda pair: pair[0],
            )
            if not due:
                break
            deadline, fut = due[0]
            self._sleepers = [(d, f) for d, f in self._sleepers if f is not fut]
            self._now = max(self._now, deadline)
            fut.set_result(None)
            # Let the woken task run before waking the next one.
            for _ in range(3):
                await asyncio.sleep(0)
        self._now = target
