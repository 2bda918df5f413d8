"""Rate-weighted traffic restoration: the pure weight maths and the activity that applies it.

Called from `workflows/replica_loss.py` after warm-up. A replacement replica is ready
before it is fast (seed 000, `ramp_back.py`): each replica's router weight follows its
measured rate, a new replica's share grows over minutes while its own TTFT p99 stays
under the SLO, and the ramp holds or backs off that replica when it does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import MutatingInput, PodRef, activity_options

RampAction = Literal["advance", "hold", "back-off", "not-warmed"]


class RampStepRecord(BaseModel):
    index: int
    weights: dict[str, int]
    rates: dict[str, float | None]
    ttft_p99_s: dict[str, float | None]
    actions: dict[str, RampAction]


class RampInput(MutatingInput):
    namespace: str
    warm_replicas: list[PodRef]
    new_replicas: list[PodRef]
    # Only these new replicas passed warm-up; the others stay at the probe share.
    warmed_pods: list[str]
    steps: int = 5
    step_interval_s: float = 60.0
    ttft_slo_s: float = 2.0
    # TTFT above this fraction of the SLO holds a replica's share where it is.
    hold_fraction: float = 0.8
    probe_share: float = 0.02
    total_weight: int = 1000
    # A ramp that backs off more often than this gives up (the replica is not getting warm).
    max_back_offs: int = 3


class RampResult(BaseModel):
    completed: bool
    steps: list[RampStepRecord]
    final_weights: dict[str, int]
    previous_weights: dict[str, int | None]
    held_back: list[str] = Field(default_factory=list)
    # Routing is not admission: shedding stays until every new replica's cache is warm.
    keep_shedding: bool
    keep_shedding_reason: str = ""
    applied_now: bool


# ---------------------------------------------------------------------------- pure maths


def rate_shares(rates: Mapping[str, float]) -> dict[str, float]:
    """Each replica's share of traffic in proportion to its measured rate (ramp_back.py)."""
    clean = {pod: max(0.0, r) for pod, r in rates.items()}
    total = sum(clean.values())
    if total <= 0:
        return {pod: 1.0 / len(clean) for pod in clean} if clean else {}
    return {pod: r / total for pod, r in clean.items()}


def shares_to_weights(shares: Mapping[str, float], total: int = 1000) -> dict[str, int]:
    """Integer router weights summing to `total` (largest remainder), never 0 for a share > 0.

    A replica with a positive share keeps at least weight 1 so it still sees probe traffic.
    """
    if not shares:
        return {}
    raw = {pod: share * total for pod, share in shares.items()}
    weights = {pod: int(v) for pod, v in raw.items()}
    leftover = total - sum(weights.values())
    for pod in sorted(raw, key=lambda p: (raw[p] - weights[p], p), reverse=True)[:leftover]:
        weights[pod] += 1
    for pod, share in shares.items():
        if share > 0 and weights[pod] == 0:
            weights[pod] = 1
    return weights


def compute_ramp_weights(rates: Mapping[str, float], total: int = 1000) -> dict[str, int]:
    """Router weights from measured rates: the rate-weighted policy of the runbook's model."""
    return shares_to_weights(rate_shares(rates), total)


class RampPlan(BaseModel):
    """One step: the rate each replica is credited with, its weight and the action taken."""

    credited_rates: dict[str, float]
    weights: dict[str, int]
    actions: dict[str, RampAction]


def plan_ramp_step(
    *,
    warm_rates: Mapping[str, float | None],
    new_ttft_p99_s: Mapping[str, float | None],
    previous_credit: Mapping[str, float],
    step: int,
    steps: int,
    ttft_slo_s: float,
    hold_fraction: float = 0.8,
    probe_share: float = 0.02,
    warmed: set[str] | frozenset[str] = frozenset(),
    total_weight: int = 1000,
) -> RampPlan:
    """Credit each replica with a rate and turn the credits into weights (pure; unit-tested).

    Warm replicas are credited with their measured rate. A new replica's credit climbs
    toward the warm replicas' mean rate by step/steps while its own TTFT p99 stays under
    `hold_fraction` of the SLO; between that and the SLO it holds its credit; over the SLO
    its credit halves. One that failed warm-up stays at the probe share.
    """
    measured = [r for r in warm_rates.values() if r is not None and r > 0]
    reference = sum(measured) / len(measured) if measured else 1.0
    credit: dict[str, float] = {
        pod: (r if r is not None and r > 0 else reference) for pod, r in warm_rates.items()
    }
    warm_total = sum(credit.values())
    # The rate that gives a share of exactly probe_share next to the warm replicas.
    probe_credit = warm_total * probe_share / max(1e-9, 1.0 - probe_share)
    ceiling = reference * min(1.0, max(0, step) / max(1, steps))
    actions: dict[str, RampAction] = {}
    for pod, ttft in new_ttft_p99_s.items():
        previous = previous_credit.get(pod, probe_credit)
        if pod not in warmed:
            actions[pod], credit[pod] = "not-warmed", probe_credit
        elif ttft is not None and ttft > ttft_slo_s:
            actions[pod], credit[pod] = "back-off", max(probe_credit, previous / 2)
        elif ttft is not None and ttft > hold_fraction * ttft_slo_s:
            actions[pod], credit[pod] = "hold", previous
        else:
            actions[pod], credit[pod] = "advance", max(previous, ceiling, probe_credit)
    return RampPlan(
        credited_rates=credit,
        weights=compute_ramp_weights(credit, total_weight),
        actions=actions,
    )


RAMP_OPTIONS = activity_options(
    start_to_close=3600, heartbeat=120, max_attempts=3, schedule_to_close=7200
)


class RampActivities:
    """The ramp loop over the gateway (weights) and the replicas' metrics (rates, TTFT)."""

    @activity.defn
    def ramp_traffic(self, input: RampInput) -> RampResult:
        """Apply rate-weighted router weights in steps, watching TTFT p99 per new endpoint."""
        raise NotImplementedError
