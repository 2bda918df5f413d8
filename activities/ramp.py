"""Rate-weighted traffic restoration: the pure weight maths and the activity that applies it.

Called from `workflows/replica_loss.py` after warm-up. A replacement replica is ready
before it is fast (seed 000, `ramp_back.py`): each replica's router weight follows its
measured rate, a new replica's share grows over minutes while its own TTFT p99 stays
under the SLO, and the ramp holds or backs off that replica when it does not.
"""

from __future__ import annotations

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
    applied_now: bool


RAMP_OPTIONS = activity_options(
    start_to_close=3600, heartbeat=120, max_attempts=3, schedule_to_close=7200
)


class RampActivities:
    """The ramp loop over the gateway (weights) and the replicas' metrics (rates, TTFT)."""

    @activity.defn
    def ramp_traffic(self, input: RampInput) -> RampResult:
        """Apply rate-weighted router weights in steps, watching TTFT p99 per new endpoint."""
        raise NotImplementedError
