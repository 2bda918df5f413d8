"""Tells an incident when one of its activity attempts failed and will be retried.

Installed on the worker by `worker/main.py:build_worker`. Temporal retries a failed
activity on its own, so the workflow sees only the last attempt's result; this activity
interceptor sends the incident the signal `activity_attempt_failed` before the failure
goes back to Temporal, and the workflow adds it to the running step's timeline entry
(`workflows/retries.py`). An attempt that never came back (its worker was killed, or it
missed its heartbeat) has nobody to report it: the attempt that retries it does, when it
starts, unless this process reported it itself. The `status` query then shows, while it happens, that a step is
retrying through a sick Kubernetes API and why. Nothing depends on the signal arriving: a
signal that cannot be sent is logged and the retry goes on.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
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
# Attempts this process reported, so their retries do not report them again.
REMEMBERED = 10_000
NO_RESULT = "no result: the worker running it was lost, or it missed its heartbeat or deadline"


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
        activity_id=info.activity_id,
    )


def unreported_attempt(info: activity.Info) -> AttemptFailed:
    """The attempt before `info`'s, which ended with no failure anyone could report."""
    return AttemptFailed(
        activity=info.activity_type,
        attempt=info.attempt - 1,
        failure=NO_RESULT,
        activity_id=info.activity_id,
    )


def attempt_key(info: activity.Info, attempt: int) -> tuple[str, str, int]:
    return (info.workflow_id or "", info.activity_id, attempt)


class AttemptReporter(Interceptor):
    def __init__(self, client: Client, *, workflow_types: frozenset[str] | None = None) -> None:
        self.client = client
        self.workflow_types = workflow_types or frozenset({WORKFLOW_NAME})
        self.reported: OrderedDict[tuple[str, str, int], None] = OrderedDict()

    def forget(self, key: tuple[str, str, int]) -> bool:
        """Whether this process reported the attempt `key` (it is forgotten either way)."""
        if key in self.reported:
            del self.reported[key]
            return True
        return False

    def remember(self, key: tuple[str, str, int]) -> None:
        self.reported[key] = None
        while len(self.reported) > REMEMBERED:
            self.reported.popitem(last=False)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ReportFailedAttempts(next, self)


class _ReportFailedAttempts(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, reporter: AttemptReporter) -> None:
        super().__init__(next)
        self.reporter = reporter

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        ours = info.workflow_type in self.reporter.workflow_types
        previous = attempt_key(info, info.attempt - 1)
        if ours and info.attempt > 1 and not self.reporter.forget(previous):
            await self._signal(info, unreported_attempt(info))
        try:
            return await super().execute_activity(input)
        except Exception as exc:
            if will_retry(exc) and ours:
                self.reporter.remember(attempt_key(info, info.attempt))
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
