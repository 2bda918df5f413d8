"""What every simulated controller shares: the store, timers on the fleet clock, pod IPs.

Called from `fleetsim.kube.cluster.Cluster`, which builds one `Context` and hands it
to each controller. Controllers react to store events synchronously (see
`Store.subscribe`); anything that must wait (grace periods, node-monitor grace)
goes through `Timers`, which sleeps on the fleet's Clock in an asyncio loop, so a
ManualClock test steps it exactly and a ScaledClock drill runs it fast.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from fleetsim.clock import Clock
from fleetsim.kube.pods import IpAllocator
from fleetsim.kube.store import Store

log = logging.getLogger(__name__)


class Timers:
    """Run callbacks after simulated delays, on an attached asyncio loop.

    Timers set before a loop is attached wait for `attach`; so a Cluster can be
    built and populated synchronously and start keeping time once served.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: list[tuple[float, Callable[[], None]]] = []
        self._tasks: set[asyncio.Future[None] | concurrent.futures.Future[None]] = set()
        self._lock = threading.Lock()

    @property
    def attached(self) -> bool:
        return self._loop is not None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._loop = loop
            waiting, self._waiting = self._waiting, []
        for deadline, fn in waiting:
            self.call_later(max(0.0, deadline - self.clock.now()), fn)

    def detach(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
            tasks, self._tasks = set(self._tasks), set()
        if loop is not None and not loop.is_closed():
            for task in tasks:
                if isinstance(task, concurrent.futures.Future):
                    task.cancel()
                else:
                    loop.call_soon_threadsafe(task.cancel)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        with self._lock:
            loop = self._loop
            if loop is None:
                self._waiting.append((self.clock.now() + delay, fn))
                return
        self._schedule(loop, delay, fn)

    def _schedule(
        self, loop: asyncio.AbstractEventLoop, delay: float, fn: Callable[[], None]
    ) -> None:
        # The deadline is fixed now, not when the task first runs: a ManualClock may be
        # advanced before the task gets its first turn on the loop.
        coro = self._run(self.clock.now() + delay, fn)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        task: asyncio.Future[None] | concurrent.futures.Future[None]
        if running is loop:
            task = loop.create_task(coro)
        else:
            task = asyncio.run_coroutine_threadsafe(coro, loop)
        with self._lock:
            self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, deadline: float, fn: Callable[[], None]) -> None:
        await self.clock.sleep(deadline - self.clock.now())
        try:
            fn()
        except Exception:
            log.exception("timer callback %r failed", fn)


@dataclass
class Context:
    store: Store
    timers: Timers
    ips: IpAllocator
    # Pods come up Ready as soon as they are bound, for fleets without a kubelet.
    ready_on_schedule: bool = False
