"""Shared vocabulary of the activity modules: options, mutating inputs, pod references.

Called from every module in `activities/` and, for the option constants and models only,
from `workflows/replica_loss.py`. Nothing here touches the outside world.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig

from activities.errors import NON_RETRYABLE_TYPES


def activity_options(
    *,
    start_to_close: float,
    heartbeat: float | None = None,
    schedule_to_close: float | None = None,
    max_attempts: int = 0,
    initial_interval: float = 1.0,
    maximum_interval: float = 30.0,
) -> ActivityConfig:
    """Timeouts and retry policy for one activity, as `workflow.execute_activity(**opts)` takes.

    Each activity module defines its constants with this, next to the activity, so the
    workflow cannot call an activity without the timeouts its author chose.
    """
    config = ActivityConfig(
        start_to_close_timeout=timedelta(seconds=start_to_close),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=initial_interval),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=maximum_interval),
            maximum_attempts=max_attempts,
            non_retryable_error_types=list(NON_RETRYABLE_TYPES),
        ),
    )
    if heartbeat is not None:
        config["heartbeat_timeout"] = timedelta(seconds=heartbeat)
    if schedule_to_close is not None:
        config["schedule_to_close_timeout"] = timedelta(seconds=schedule_to_close)
    return config


class MutatingInput(BaseModel):
    """Every activity that changes something carries the workflow's operation id.

    `op_id` is derived in the workflow (never from the run id) so a retried or replayed
    step proposes the same operation and the ledger refuses to apply it twice.
    """

    op_id: str
    incident_id: str
    dry_run: bool = False


class PodRef(BaseModel):
    """A pod as the activities exchange it: where it runs and where to scrape it."""

    namespace: str
    name: str
    node: str | None = None
    ip: str | None = None
    metrics_url: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class Check(BaseModel):
    """One verification check: the verdict and the numbers it was read from."""

    name: str
    passed: bool
    evidence: dict[str, Any] = Field(default_factory=dict)
    detail: str = ""


def heartbeat(*details: object) -> None:
    """Heartbeat when running as an activity; a no-op when called directly."""
    if activity.in_activity():
        activity.heartbeat(*details)


def wait(seconds: float, *details: object) -> None:
    """Sleep in short slices, heartbeating, so a cancelled activity notices promptly."""
    deadline = time.monotonic() + max(0.0, seconds)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        heartbeat(*details)
        time.sleep(min(remaining, 0.5))
