"""A workflow whose one activity fails twice before it succeeds, for worker/attempts.py's test
(workflows must live in an importable module)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.errors import TemporaryError
    from workflows.types import SIGNAL_ATTEMPT_FAILED, AttemptFailed


@activity.defn
async def flaky_patch(failures: int) -> int:
    attempt = activity.info().attempt
    if attempt <= failures:
        raise TemporaryError(
            f"kubernetes patch pod serving/a: 429 Too Many Requests (attempt {attempt})",
            retry_after=timedelta(seconds=2),
        )
    return attempt


@workflow.defn
class RetriedThenDone:
    def __init__(self) -> None:
        self.reports: list[AttemptFailed] = []

    @workflow.signal(name=SIGNAL_ATTEMPT_FAILED)
    def attempt_failed(self, report: AttemptFailed) -> None:
        self.reports.append(report)

    @workflow.run
    async def run(self, failures: int) -> list[AttemptFailed]:
        await workflow.execute_activity(
            flaky_patch,
            failures,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5),
        )
        return self.reports


@activity.defn
async def stalls_once() -> int:
    """Its first attempt never answers, as if its worker had been killed mid-call."""
    attempt = activity.info().attempt
    if attempt == 1:
        await asyncio.sleep(30)
    return attempt


@workflow.defn
class StalledThenDone(RetriedThenDone):
    @workflow.run
    async def run(self, failures: int) -> list[AttemptFailed]:
        await workflow.execute_activity(
            stalls_once,
            start_to_close_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
        )
        return self.reports
