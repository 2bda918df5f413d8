"""One simulated vLLM engine: a paced FIFO queue, warm-up, KV pressure and counters.

Owned by `fleetsim.replica` (which puts HTTP in front of it) and driven by the kubelet
(start, kill) and the fault injector (fake-alive, GPU error, rank lost). No HTTP here,
so a test can step it on a ManualClock.

The service model is `queueing.FifoServer` over the rate from `queueing.warm_rate_at`:
a replacement that goes ready starts at `cold_frac` of its warm rate and climbs over
`warmup_s`, while its prefix-cache hit rate climbs from zero to `WARM_PREFIX_HIT_RATE`.
A request enters the model at its offered arrival when the caller stamps it (the router
does, from the traffic generator's schedule), so the simulator's own lag between the
two does not turn steady load into bursts.
"""

from __future__ import annotations

import asyncio
import bisect
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import Enum

from fleetsim.clock import Clock
from fleetsim.queueing import FifoServer, ServiceCurve, warm_progress, warm_rate_at

WARM_PREFIX_HIT_RATE = 0.8
PROMPT_TOKENS = 64
# vLLM's TTFT histogram buckets (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
# KV pressure at which the scheduler starts preempting running sequences.
PREEMPT_AT_KV_USAGE = 0.95
# Fleet seconds a stamped arrival may lie in the past. Stamps trail the clock by the
# simulator's own lag (a stall of the event loop, at most `traffic._MAX_CATCH_UP_S` plus
# the HTTP hop); an older one is admitted as this old, which bounds how far back the
# queue keeps idle capacity to backfill.
MAX_ARRIVAL_AGE_S = 10.0


class Health(Enum):
    HEALTHY = "healthy"
    FAKE_ALIVE = "fake-alive"  # process up, nothing answers (kill -STOP)
    GPU_HUNG = "gpu-hung"  # /health answers, inference never returns (Xid 79)
    GPU_ERROR = "gpu-error"  # /health answers, inference fails (Xid 48, DBE ECC)
    GROUP_BROKEN = "group-broken"  # /health answers, collectives time out (rank lost)
    DEAD = "dead"  # process gone


class EngineError(Exception):
    """Inference failed inside the engine; `status` is the HTTP code vLLM answers with."""

    def __init__(self, message: str, *, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class EngineConfig:
    model: str
    warm_rate: float
    cold_frac: float
    warmup_s: float
    tokens: int
    token_interval_s: float
    # Concurrent sequences the KV cache holds at full usage.
    max_num_seqs: int = 0

    def __post_init__(self) -> None:
        if self.max_num_seqs <= 0:
            # Enough for the warm rate's steady-state concurrency, with 50% headroom.
            busy = self.warm_rate * max(self.tokens * self.token_interval_s, 0.05)
            self.max_num_seqs = max(2, math.ceil(busy * 1.5))


@dataclass
class EngineStats:
    waiting: int = 0
    running: int = 0
    preemptions: int = 0
    success: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    ttft_counts: list[int] = field(default_factory=lambda: [0] * (len(TTFT_BUCKETS) + 1))
    ttft_sum: float = 0.0
    last_queue_wait_s: float = 0.0

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_counts[bisect.bisect_left(TTFT_BUCKETS, seconds)] += 1
        self.ttft_sum += seconds

    @property
    def ttft_count(self) -> int:
        return sum(self.ttft_counts)


@dataclass(frozen=True)
class Token:
    index: int
    text: str
    queue_wait_s: float


def admission_time(arrived_at: float | None, *, now: float, started_at: float) -> float:
    """When the queue model admits a request stamped `arrived_at` that reaches it at `now`.

    Unstamped requests (fleetmend's warm-up calls, any caller but the router) arrive now.
    A stamp is clamped into [now - MAX_ARRIVAL_AGE_S, now], and never before the engine
    process started: a request cannot have been queued by an engine that did not exist,
    nor before it was sent. One clock drives the whole fleet, so a stamp from the future
    is not skew; the traffic generator releases arrivals due within its tick early.
    """
    if arrived_at is None:
        return now
    return min(now, max(arrived_at, now - MAX_ARRIVAL_AGE_S, started_at))


class Engine:
    """Admit, queue, serve and stream; every wait goes through the fleet's clock."""

    def __init__(self, config: EngineConfig, clock: Clock, *, ready_at: float, warm: bool) -> None:
        self.config = config
        self.clock = clock
        self.started_at = ready_at
        # Warm replicas are placed far enough in the past that their warm-up is over.
        self.ready_at = ready_at - (config.warmup_s if warm else 0.0)
        self.stats = EngineStats()
        self.health = Health.HEALTHY
        self._server = FifoServer()
        self._killed = asyncio.Event()
        self._frozen = asyncio.Event()

    # --- state the kubelet and faults change -----------------------------------------

    def kill(self) -> None:
        """The process died: queued and streaming requests break where they stand."""
        self.health = Health.DEAD
        self._killed.set()

    def set_health(self, health: Health) -> None:
        self.health = health
        if health is Health.DEAD:
            self._killed.set()

    @property
    def alive(self) -> bool:
        return self.health is not Health.DEAD

    # --- rates -----------------------------------------------------------------------

    def age_s(self) -> float:
        return self.clock.now() - self.ready_at

    def service_rate(self) -> float:
        c = self.config
        return warm_rate_at(
            self.age_s(), warm_rate=c.warm_rate, cold_frac=c.cold_frac, warmup_s=c.warmup_s
        )

    def curve(self) -> ServiceCurve:
        c = self.config
        return ServiceCurve(c.warm_rate, c.cold_frac, c.warmup_s, self.ready_at)

    def prefix_hit_rate(self) -> float:
        return WARM_PREFIX_HIT_RATE * warm_progress(self.age_s(), self.config.warmup_s)

    def kv_cache_usage(self) -> float:
        # Running sequences hold KV blocks; a deep queue keeps the cache full between them.
        busy = self.stats.running + 0.1 * self.stats.waiting
        return min(1.0, busy / self.config.max_num_seqs)

    # --- serving ---------------------------------------------------------------------

    async def hang(self) -> None:
        """Block until the process dies: what a frozen or GPU-hung engine does to a caller."""
        await self._killed.wait()
        raise EngineError("engine process exited", status=502)

    async def generate(
        self, max_tokens: int | None = None, *, arrived_at: float | None = None
    ) -> AsyncIterator[Token]:
        """Queue, then stream tokens. Raises EngineError if the engine dies or fails.

        `arrived_at` is the request's arrival on the fleet clock, when the caller knows
        it better than the engine does (see `admission_time`).
        """
        if self.health is Health.GPU_HUNG:
            await self.hang()
        if self.health is Health.GPU_ERROR:
            self.stats.failed += 1
            raise EngineError("CUDA error: uncorrectable ECC error encountered")
        if self.health is Health.GROUP_BROKEN:
            # Collectives wait out the NCCL timeout before the leader gives up.
            await self._sleep_or_die(min(30.0, self.config.token_interval_s * 20 + 1.0))
            self.stats.failed += 1
            raise EngineError("NCCL error: remote rank unreachable (watchdog timeout)")
        now = self.clock.now()
        # Requests held up together by a stall of the simulator's loop reach the engine
        # together; admitted at their offered arrivals they queue as they were offered,
        # not as a burst that never happened. Only the model's clock moves back: the
        # request still waits from now until its modelled start, if that is still ahead.
        arrived = admission_time(arrived_at, now=now, started_at=self.started_at)
        start = self._server.admit(arrived, self.curve(), horizon=now - MAX_ARRIVAL_AGE_S)
        self.stats.waiting += 1
        try:
            await self._sleep_or_die(start - now)
        finally:
            self.stats.waiting -= 1
        # The engine's own figures (queue wait, TTFT) are the model's, not the time the
        # simulator took to wake up: at 20x on two busy cores, a 50 ms stall of the event
        # loop is a second of fleet time added to every request in flight, which no
        # engine would show and which made TTFT checks fail at random.
        wait = start - arrived
        self.stats.last_queue_wait_s = wait
        if self.kv_cache_usage() >= PREEMPT_AT_KV_USAGE:
            self.stats.preemptions += 1
        self.stats.running += 1
        self.stats.prompt_tokens += PROMPT_TOKENS
        self.stats.prefix_queries += PROMPT_TOKENS
        self.stats.prefix_hits += round(PROMPT_TOKENS * self.prefix_hit_rate())
        n = self.config.tokens if max_tokens is None else max(1, min(max_tokens, 4096))
        try:
            for i in range(n):
                await self._sleep_or_die(self.config.token_interval_s)
                if i == 0:
                    self.stats.observe_ttft(wait + self.config.token_interval_s)
                self.stats.generation_tokens += 1
                yield Token(index=i, text=f" tok{i}", queue_wait_s=wait)
            self.stats.success += 1
        finally:
            self.stats.running -= 1

    async def _sleep_or_die(self, seconds: float) -> None:
        # Checked around the sleep rather than raced against it: a dead replica's
        # connections are cut by the address host at once, so the caller already knows;
        # this only stops the orphaned generator, and a race costs two tasks per token.
        if self._killed.is_set():
            raise EngineError("engine process exited", status=502)
        if seconds > 0:
            await self.clock.sleep(seconds)
        if self._killed.is_set():
            raise EngineError("engine process exited", status=502)
