"""Tells an incident when one of its activity attempts failed and will be retried.

Installed on the worker by `worker/main.py:build_worker`. Temporal retries a failed
activity on its own, so the workflow sees only the last attempt's result; this activity
interceptor sends the incident the signal `activity_attempt_failed` before the failure
goes back to Temporal, and the workflow adds it to the running step's timeline entry
(`workflows/retries.py`). The `status` query then shows, while it happens, that a step is
retrying through a sick Kubernetes API and why. Nothing depends on the signal arriving: a
signal that cannot be sent is logged and the retry goes on.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from workflows.types import SIGNAL_ATTEMPT_FAILED, WORKFLOW_NAME, AttemptFailed

log = logging.getLogger("fleetmend.worker")

SIGNAL_TIMEOUT = timedelta(seconds=5)


def will_retry(exc: BaseException) -> bool:
    """Whether Temporal may retry after `exc` (cancellation and permanent errors: no)."""
    if not isinstance(exc, Exception):
        return False
    return not (isinstance(exc, ApplicationError) and exc.non_retryable)


def is_last_attempt(attempt: int, policy: RetryPolicy | None, error_type: str | None) -> bool:
    if policy is None:
        return False
    if error_type is not None and error_type in (policy.non_retryable_error_types or ()):
        return True
    return policy.maximum_attempts > 0 and attempt >= policy.maximum_attempts


def attempt_report(info: activity.Info, exc: Exception) -> AttemptFailed:
    delay = exc.next_retry_delay if isinstance(exc, ApplicationError) else None
    error_type = exc.type if isinstance(exc, ApplicationError) else type(exc).__name__
    message = exc.message if isinstance(exc, ApplicationError) else f"{type(exc).__name__}: {exc}"
    return AttemptFailed(
        activity=info.activity_type,
        attempt=info.attempt,
        failure=message,
        retry_in_s=None if delay is None else delay.total_seconds(),
        final=is_last_attempt(info.attempt, info.retry_policy, error_type),
    )


class AttemptReporter(Interceptor):
    def __init__(self, client: Client, *, workflow_types: frozenset[str] | None = None) -> None:
        self.client = client
        self.workflow_types = workflow_types or frozenset({WORKFLOW_NAME})

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ReportFailedAttempts(next, self)


class _ReportFailedAttempts(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, reporter: AttemptReporter) -> None:
        super().__init__(next)
        self.reporter = reporter

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await super().execute_activity(input)
        except Exception as exc:
            info = activity.info()
            if will_retry(exc) and info.workflow_type in self.reporter.workflow_types:
                await self._signal(info, attempt_report(info, exc))
            raise

    async def _signal(self, info: activity.Info, report: AttemptFailed) -> None:
        if info.workflow_id is None:
            return
        handle = self.reporter.client.get_workflow_handle(info.workflow_id)
        try:
            await handle.signal(SIGNAL_ATTEMPT_FAILED, report, rpc_timeout=SIGNAL_TIMEOUT)
        except Exception as err:  # the retry matters, the note about it does not
            log.warning(
                "could not note a failed attempt of %s on %s: %s",
                info.activity_type,
                info.workflow_id,
                err,
            )
