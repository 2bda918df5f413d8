"""Pure decisions of the runbook: blast radius, cool-down and half-open, probe verdicts.

Called from `workflows/replica_loss.py`; plain functions on plain values, so they are
unit-tested without Temporal and stay deterministic inside the workflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from statistics import fmean

from pydantic import BaseModel


class BlastRadiusDecision(BaseModel):
    """Whether taking `proposed` out of routing stays within the automatic limit."""

    proposed: str
    allowed: bool
    capacity_out_before: float
    capacity_out_after: float
    limit: float
    reason: str


def serving_capacity(
    replicas: Iterable[str], measured_rates: Mapping[str, float | None]
) -> dict[str, float]:
    """Each replica's share of serving capacity, from its measured request rate.

    A replica without a measurement (a dead one, or a scrape that failed) counts as the
    pool's average measured replica: neither free nor dominant, and one lost replica of n
    equal ones is exactly 1/n of the capacity however noisy each measurement is.
    With nothing measured every replica counts as 1: the decision falls back to counts.
    """
    names = list(dict.fromkeys(replicas))
    known = [r for r in (measured_rates.get(n) for n in names) if r is not None and r > 0]
    fallback = fmean(known) if known else 1.0
    out: dict[str, float] = {}
    for name in names:
        rate = measured_rates.get(name)
        out[name] = rate if rate is not None and rate > 0 else fallback
    return out


def check_blast_radius(
    capacity: Mapping[str, float], out_of_routing: Iterable[str], proposed: str, limit: float
) -> BlastRadiusDecision:
    """Automatic derouting stops once the pool's capacity out of routing would pass `limit`.

    Counted in serving capacity, not replicas: derouting one replica that carries a third
    of the pool is a bigger act than derouting one of eight equal ones.
    """
    total = sum(capacity.values()) or 1.0
    out = set(out_of_routing) - {proposed}
    before = sum(capacity.get(n, 0.0) for n in out) / total
    after = before + capacity.get(proposed, 0.0) / total
    # A hair of tolerance so that exactly 2 of 8 equal replicas is "at" 25%, not over it.
    allowed = after <= limit + 1e-9
    verdict = "within" if allowed else "beyond"
    return BlastRadiusDecision(
        proposed=proposed,
        allowed=allowed,
        capacity_out_before=round(before, 4),
        capacity_out_after=round(after, 4),
        limit=limit,
        reason=(
            f"derouting {proposed} takes {after:.0%} of the pool's serving capacity out of "
            f"routing ({verdict} the automatic limit of {limit:.0%})"
        ),
    )


def next_cooldown(current_s: float, *, failed: bool, base_s: float, max_s: float) -> float:
    """Seed 002, 8.3: a failed probe doubles the cool-down, up to `max_s`; a pass resets it."""
    if not failed:
        return base_s
    return min(max(current_s, base_s) * 2.0, max_s)


def probe_passed(
    requests_per_s: float | None, ttft_p99_s: float | None, *, ttft_slo_s: float
) -> tuple[bool, str]:
    """A half-open replica earns its full share only by serving its probe share within the SLO."""
    if requests_per_s is None or requests_per_s <= 0:
        return False, "served nothing during the probe"
    if ttft_p99_s is None:
        return False, "no TTFT measured during the probe"
    if ttft_p99_s > ttft_slo_s:
        return False, f"TTFT p99 {ttft_p99_s:.2f}s above the SLO of {ttft_slo_s:.2f}s"
    return True, f"served {requests_per_s:.1f} req/s with TTFT p99 {ttft_p99_s:.2f}s"


def probe_weight(probe_share: float, total_weight: int = 1000) -> int:
    """Router weight of the half-open probe share (at least 1, so it does receive traffic)."""
    return max(1, round(probe_share * total_weight))


def hold_weights(
    warm: list[str], held: list[str], probe_share: float, total_weight: int = 1000
) -> dict[str, int]:
    """Router weights that give the `held` (cold) replicas the probe share between them and
    the warm ones the rest, evenly: a cold replica never gets an equal share on ready."""
    if not held:
        return {}
    if not warm:
        return {pod: max(1, total_weight // len(held)) for pod in held}
    weights = {pod: max(1, round(probe_share * total_weight / len(held))) for pod in held}
    rest = total_weight - sum(weights.values())
    weights.update({pod: max(1, rest // len(warm)) for pod in warm})
    return weights


class ProbeShare(BaseModel):
    """The share of the pool's traffic a cold replica is held and probed at, and why."""

    share: float
    bound: str  # "floor", "measured" or "ceiling": which limit set the share
    reason: str


def probe_floor(
    floor: float, *, pool_per_s: float | None, window_s: float, min_requests: int
) -> float:
    """The least share that still sends a probe `min_requests` in its window: a share of
    a quiet pool's traffic can be no request at all, and a probe that saw none fails."""
    if pool_per_s is None or pool_per_s <= 0 or window_s <= 0:
        return floor
    return max(floor, min_requests / (pool_per_s * window_s))


def probe_share_from_rate(
    *,
    ceiling: float,
    floor: float,
    served_per_s: float | None,
    pool_per_s: float | None,
    headroom: float = 0.8,
) -> ProbeShare:
    """The probe share a replica can serve: `headroom` of its measured service rate over
    the pool's traffic, between `floor` (it still gets requests to measure) and the
    configured `ceiling`.

    A fixed share is a fixed rate: 10% of a pool's traffic is 0.3 of a warm replica's
    rate with three warm, more than a replacement under about 30% of warm serves, and a
    replica sent more than it serves queues without bound while it is held. Both rates
    are in the same unit (whatever the clock of the measurements), so only their ratio
    matters. Without both measurements the replica gets only the floor.
    """
    if not 0 < floor <= ceiling <= 1:
        raise ValueError(
            f"probe share bounds must satisfy 0 < floor <= ceiling <= 1, got floor={floor} "
            f"and ceiling={ceiling}"
        )
    if not 0 < headroom <= 1:
        raise ValueError(f"probe share headroom must be in (0, 1], got {headroom}")
    if served_per_s is None or served_per_s <= 0:
        return ProbeShare(
            share=floor,
            bound="floor",
            reason=f"no service rate measured: the floor share of {floor:.1%}",
        )
    if pool_per_s is None or pool_per_s <= 0:
        return ProbeShare(
            share=floor,
            bound="floor",
            reason=f"the pool's traffic not measured: the floor share of {floor:.1%}",
        )
    fits = headroom * served_per_s / pool_per_s
    measured = (
        f"serves {served_per_s:.2f} req/s of the pool's {pool_per_s:.2f}; "
        f"{headroom:.0%} of it is {fits:.1%} of the traffic"
    )
    if fits >= ceiling:
        return ProbeShare(
            share=ceiling,
            bound="ceiling",
            reason=f"{measured}, capped at the configured probe share of {ceiling:.1%}",
        )
    if fits <= floor:
        return ProbeShare(
            share=floor,
            bound="floor",
            reason=f"{measured}, raised to the floor of {floor:.1%} so it still gets requests",
        )
    return ProbeShare(
        share=fits,
        bound="measured",
        reason=f"{measured}, under the configured probe share of {ceiling:.1%}",
    )
