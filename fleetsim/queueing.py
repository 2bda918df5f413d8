"""Queueing arithmetic shared by the simulated replicas and the ramp reference.

Two consumers:

* `fleetsim.engine` queues each replica's requests in a `FifoServer` that drains at
  the rate `warm_rate_at` gives (cold fraction climbing to warm over the warm-up
  window): the per-request, continuous-time counterpart of the fluid queue below.
  `simulate_ramp_requests` runs the ramp experiment through it.
* `simulate_ramp` is a discrete-step fluid queue (one step per second) over a pool of
  warm replicas plus one warming replacement. It reproduces the runbook's `ramp_back.py`
  table and is the pure reference `activities/ramp.py` can check its weights against.

Accounting. The runbook's model counts a step's completions as
`min(backlog_after + inflow, rate)`; in the step where a backlog drains to zero this
omits the backlog it just cleared (its equal-share run serves 35995 of 36000 requests).
`accounting="runbook"` keeps that rule so the published figures reproduce exactly;
`accounting="conserving"` counts `min(backlog_before + inflow, rate)`, so served plus
final backlog equals arrivals. Peak waits and late counts are the same either way.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

RampPolicy = Literal["equal_on_ready", "ramp_on_measured_rate"]
Accounting = Literal["runbook", "conserving"]


def warm_rate_at(age_s: float, *, warm_rate: float, cold_frac: float, warmup_s: float) -> float:
    """Service rate of a replica `age_s` seconds after it went ready: linear climb to warm."""
    if warmup_s <= 0:
        return warm_rate
    progress = min(max(age_s, 0.0), warmup_s) / warmup_s
    return warm_rate * (cold_frac + (1.0 - cold_frac) * progress)


def warm_progress(age_s: float, warmup_s: float) -> float:
    """0 at ready, 1 once warm; drives the prefix-cache hit rate a replica reports."""
    if warmup_s <= 0:
        return 1.0
    return min(max(age_s, 0.0), warmup_s) / warmup_s


@dataclass
class FluidQueue:
    """One replica's backlog, advanced in fixed steps of `dt` seconds."""

    deadline_s: float
    accounting: Accounting = "conserving"
    backlog: float = 0.0

    def step(self, inflow: float, rate: float, dt: float = 1.0) -> StepOutcome:
        """Admit `inflow` requests and serve up to `rate * dt`; say how many were late.

        The wait a request joining now would see is the remaining backlog over the rate;
        the step's completions count as late when that wait is past the deadline.
        """
        capacity = rate * dt
        before = self.backlog
        self.backlog = max(0.0, before + inflow - capacity)
        wait = self.backlog / rate if rate > 0 else (math.inf if self.backlog > 0 else 0.0)
        if self.accounting == "runbook":
            served = min(self.backlog + inflow, capacity)
        else:
            served = min(before + inflow, capacity)
        late = served if wait > self.deadline_s else 0.0
        return StepOutcome(served=served, late=late, wait_s=wait)


@dataclass(frozen=True)
class StepOutcome:
    served: float
    late: float
    wait_s: float


@dataclass(frozen=True)
class RampResult:
    served: float
    late: float
    goodput: float
    peak_wait_new: float
    final_depth_new: float
    arrivals: float


def ramp_shares(policy: RampPolicy, rates: list[float]) -> list[float]:
    """Fraction of arrivals each replica gets under `policy` (the replacement is last)."""
    if policy == "equal_on_ready":
        return [1.0 / len(rates)] * len(rates)
    if policy == "ramp_on_measured_rate":
        total = sum(rates)
        return [r / total for r in rates]
    raise ValueError(f"unknown ramp policy {policy!r}")


def simulate_ramp(
    policy: RampPolicy,
    arrival: float | None = None,
    warm_rate: float = 20.0,
    cold_frac: float = 0.25,
    warmup_s: float = 120.0,
    deadline_s: float = 30.0,
    warm_replicas: int = 3,
    seconds: int = 600,
    *,
    accounting: Accounting = "runbook",
) -> RampResult:
    """Run the ramp experiment: `warm_replicas` warm replicas plus one warming replacement.

    `arrival` defaults to what the warm survivors already serve (the replacement is
    headroom); pass more to model a fleet that depends on the replacement.
    """
    if arrival is None:
        arrival = warm_rate * warm_replicas
    queues = [FluidQueue(deadline_s, accounting) for _ in range(warm_replicas + 1)]
    served = late = peak_wait_new = 0.0
    for t in range(seconds):
        new_rate = warm_rate_at(t, warm_rate=warm_rate, cold_frac=cold_frac, warmup_s=warmup_s)
        rates = [warm_rate] * warm_replicas + [new_rate]
        for i, (share, rate) in enumerate(zip(ramp_shares(policy, rates), rates, strict=True)):
            out = queues[i].step(arrival * share, rate)
            served += out.served
            late += out.late
            if i == warm_replicas:
                peak_wait_new = max(peak_wait_new, out.wait_s)
    return RampResult(
        served=served,
        late=late,
        goodput=served - late,
        peak_wait_new=peak_wait_new,
        final_depth_new=queues[-1].backlog,
        arrivals=arrival * seconds,
    )


@dataclass(frozen=True)
class ServiceCurve:
    """A replica's cumulative service capacity: requests it can have served by time t.

    The integral of `warm_rate_at` from `ready_at`: quadratic over the warm-up window,
    linear after. The fluid queue drains at the current rate; a FIFO request starts
    once this curve has covered everything queued ahead of it.
    """

    warm_rate: float
    cold_frac: float
    warmup_s: float
    ready_at: float

    def _ramp(self) -> bool:
        return self.warmup_s > 0 and self.cold_frac < 1.0

    def capacity(self, t: float) -> float:
        w, c, W = self.warm_rate, self.cold_frac, self.warmup_s
        a = t - self.ready_at
        if not self._ramp() or a <= 0:
            return w * (c if self._ramp() else 1.0) * a
        if a <= W:
            return w * (c * a + (1.0 - c) * a * a / (2.0 * W))
        return w * (c * W + (1.0 - c) * W / 2.0) + w * (a - W)

    def time_at(self, units: float) -> float:
        """Inverse of `capacity`: when the curve reaches `units`."""
        w, c, W = self.warm_rate, self.cold_frac, self.warmup_s
        if not self._ramp():
            return self.ready_at + units / w
        if units <= 0:
            return self.ready_at + units / (w * c)
        at_warm = w * (c * W + (1.0 - c) * W / 2.0)
        if units <= at_warm:
            a2 = (1.0 - c) * w / (2.0 * W)
            b = c * w
            return self.ready_at + (-b + math.sqrt(b * b + 4.0 * a2 * units)) / (2.0 * a2)
        return self.ready_at + W + (units - at_warm) / w


class FifoServer:
    """One replica's engine queue: FIFO, draining at the current (warming) rate.

    `admit` returns when a request arriving at `arrived` starts service; the gap is its
    queue wait. Event-driven (no tick loop), so hundreds of idle replicas cost nothing
    and a ManualClock steps them exactly. Positions are kept in units of the service
    curve, so a backlog built while cold drains faster as the replica warms: the
    continuous-time form of `FluidQueue`'s drain rule.

    Each request takes one unit of the curve at or after its arrival. Arrivals usually
    come in order and then this is plain FIFO. One that comes after a later arrival (the
    simulator delivered a burst out of order) takes the first whole unit the server left
    idle after its own arrival, if there is one: the place it would have had, had it come
    on time, without moving a request already placed. Otherwise it queues at the tail.
    """

    def __init__(self) -> None:
        self._next_unit = -math.inf
        # Idle stretches [start, end) of at least one unit below `_next_unit`, in order.
        self._gaps: list[tuple[float, float]] = []

    def admit(self, arrived: float, curve: ServiceCurve, *, horizon: float = -math.inf) -> float:
        """Place a request that arrived at `arrived`; returns when it starts service.

        `horizon`: no later call admits an arrival before it, so idle capacity before
        it is forgotten (keeps the server small when arrivals may come out of order).
        """
        self._forget_before(curve.capacity(horizon))
        unit = curve.capacity(arrived)
        if unit >= self._next_unit:
            if unit - self._next_unit >= 1.0:
                self._gaps.append((self._next_unit, unit))
            self._next_unit = unit + 1.0
        else:
            unit = self._backfill(unit)
        return max(arrived, curve.time_at(unit))

    def _backfill(self, unit: float) -> float:
        first = bisect.bisect_right(self._gaps, unit, key=lambda gap: gap[1])
        for i in range(first, len(self._gaps)):
            start, end = self._gaps[i]
            at = max(start, unit)
            if end - at >= 1.0:
                rest = [(a, b) for a, b in ((start, at), (at + 1.0, end)) if b - a >= 1.0]
                self._gaps[i : i + 1] = rest
                return at
        at = self._next_unit
        self._next_unit += 1.0
        return at

    def _forget_before(self, unit: float) -> None:
        # Gaps are in order, so those with no whole unit left after `unit` are a prefix.
        keep = 0
        while keep < len(self._gaps) and self._gaps[keep][1] - max(self._gaps[keep][0], unit) < 1:
            keep += 1
        del self._gaps[:keep]

    def backlog(self, now: float, curve: ServiceCurve) -> float:
        """Requests placed to be served after `now`: the work queued ahead of `now`."""
        c = curve.capacity(now)
        idle = sum(max(0.0, end - max(start, c)) for start, end in self._gaps)
        return max(0.0, self._next_unit - c - idle)


def simulate_ramp_requests(
    policy: RampPolicy,
    arrival: float | None = None,
    warm_rate: float = 20.0,
    cold_frac: float = 0.25,
    warmup_s: float = 120.0,
    deadline_s: float = 30.0,
    warm_replicas: int = 3,
    seconds: int = 600,
) -> RampResult:
    """The same experiment, request by request, through the replicas' own `FifoServer`.

    Evenly spaced arrivals, routed by smooth weighted round-robin with the policy's
    shares; a request is late when its own queue wait exceeds the deadline. Unlike the
    fluid model's per-step estimate (backlog over the current rate), a request's wait
    here accounts for the rate rising while it queues.
    """
    if arrival is None:
        arrival = warm_rate * warm_replicas
    n = warm_replicas + 1
    curves = [ServiceCurve(warm_rate, 1.0, 0.0, 0.0)] * warm_replicas
    curves.append(ServiceCurve(warm_rate, cold_frac, warmup_s, 0.0))
    servers = [FifoServer() for _ in range(n)]
    credit = [0.0] * n
    late = served = 0
    peak_wait_new = 0.0
    total = int(arrival * seconds)
    for k in range(total):
        t = k / arrival
        new_rate = warm_rate_at(t, warm_rate=warm_rate, cold_frac=cold_frac, warmup_s=warmup_s)
        shares = ramp_shares(policy, [warm_rate] * warm_replicas + [new_rate])
        for i in range(n):
            credit[i] += shares[i]
        i = max(range(n), key=credit.__getitem__)
        credit[i] -= 1.0
        wait = servers[i].admit(t, curves[i], horizon=t) - t
        served += 1
        if i == warm_replicas:
            peak_wait_new = max(peak_wait_new, wait)
        if wait > deadline_s:
            late += 1
    return RampResult(
        served=float(served),
        late=float(late),
        goodput=float(served - late),
        peak_wait_new=peak_wait_new,
        final_depth_new=servers[-1].backlog(seconds, curves[-1]),
        arrivals=float(total),
    )
