"""Warm-up before traffic: the HA article's L2 warm-up sent straight to one replica.

Called from `workflows/replica_loss.py` for each promoted or new replica before the ramp
gives it more than a probe's share. Short, medium and concurrent requests cover the batch
and sequence shapes CUDA graph capture needs (seed 002, section 7.2); the replica passes
only if its TTFT dropped (or was already at the warm figure). Inference is safe to repeat,
so this activity does not go through the ledger.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import PodRef, activity_options


class WarmupInput(BaseModel):
    replica: PodRef
    model: str
    short_requests: int = 3
    short_tokens: int = 8
    medium_requests: int = 1
    medium_tokens: int = 256
    concurrent_requests: int = 8
    # TTFT must fall by at least this fraction, unless it is already at or under warm_ttft_s.
    min_ttft_drop: float = 0.3
    warm_ttft_s: float = 0.5
    request_timeout_s: float = 60.0


class WarmupResult(BaseModel):
    pod: str
    passed: bool
    reason: str
    ttft_before_s: float | None
    ttft_after_s: float | None
    requests_sent: int
    failures: int
    shapes: dict[str, int] = Field(default_factory=dict)


WARMUP_OPTIONS = activity_options(start_to_close=300, heartbeat=30, max_attempts=3)


class WarmupActivities:
    """Sends warm-up requests to a replica's own address, bypassing the router."""

    @activity.defn
    def warm_up_replica(self, input: WarmupInput) -> WarmupResult:
        """Short, medium and concurrent requests; pass if TTFT dropped."""
        raise NotImplementedError
