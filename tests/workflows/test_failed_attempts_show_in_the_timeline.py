"""A failed activity attempt that Temporal will retry is noted in the running step's
timeline entry: what the worker reports (`worker/attempts.py`) and how the entry keeps it
(`workflows/retries.py`)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from activities.errors import PermanentError, TemporaryError
from tests.workflows.attempts_sample import (
    RetriedThenDone,
    StalledThenDone,
    flaky_patch,
    stalls_once,
)
from worker.attempts import (
    NO_RESULT,
    AttemptReporter,
    attempt_report,
    is_last_attempt,
    will_retry,
)
from workflows.retries import KEEP_FIRST, KEEP_LAST, note_retry
from workflows.types import AttemptFailed

POLICY = RetryPolicy(maximum_attempts=8, non_retryable_error_types=["PermanentError"])


def info(attempt: int, policy: RetryPolicy | None = POLICY) -> activity.Info:
    return dataclasses.replace(
        ActivityEnvironment().info,
        activity_type="deroute_replica",
        attempt=attempt,
        workflow_type="ReplicaLossWorkflow",
        retry_policy=policy,
    )


def failed(
    attempt: int, failure: str = "kubernetes patch pod serving/a: 500", activity_id: str = "7"
) -> AttemptFailed:
    return AttemptFailed(
        activity="deroute_replica", attempt=attempt, failure=failure, activity_id=activity_id
    )


def test_a_temporary_error_reports_its_attempt_message_and_the_servers_retry_after() -> None:
    error = TemporaryError("kubernetes patch pod serving/a: 429", retry_after=timedelta(seconds=4))
    report = attempt_report(info(3), error)
    assert report == AttemptFailed(
        activity="deroute_replica",
        attempt=3,
        failure="kubernetes patch pod serving/a: 429",
        retry_in_s=4.0,
        final=False,
        activity_id=info(3).activity_id,
    )


def test_the_last_attempt_of_the_policy_is_marked_final() -> None:
    assert attempt_report(info(8), TemporaryError("x")).final
    assert not attempt_report(info(7), TemporaryError("x")).final
    assert not is_last_attempt(50, RetryPolicy(maximum_attempts=0), "TemporaryError")
    assert not is_last_attempt(50, None, "TemporaryError")
    assert is_last_attempt(1, POLICY, "PermanentError")


def test_an_unexpected_exception_is_reported_by_its_type() -> None:
    report = attempt_report(info(2), OSError("connection reset"))
    assert report.failure == "OSError: connection reset"
    assert report.retry_in_s is None


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (TemporaryError("x"), True),
        (OSError("x"), True),
        (ApplicationError("x"), True),
        (PermanentError("x"), False),
        (ApplicationError("x", non_retryable=True), False),
    ],
)
def test_only_failures_temporal_will_retry_are_reported(exc: Exception, retried: bool) -> None:
    assert will_retry(exc) is retried


def test_each_failed_attempt_adds_to_the_entry_and_the_count() -> None:
    evidence: dict[str, Any] = {"pods": ["a"]}
    note_retry(evidence, failed(1))
    note_retry(evidence, failed(2, "kubernetes patch pod serving/a: 429 (retry after 2s)"))
    assert evidence["pods"] == ["a"]
    assert evidence["failed_attempts"] == 2
    assert [r["attempt"] for r in evidence["retries"]] == [1, 2]
    assert evidence["retries"][1]["failure"].endswith("(retry after 2s)")


def test_a_long_outage_keeps_the_first_and_the_latest_failures_and_counts_them_all() -> None:
    evidence: dict[str, Any] = {}
    for attempt in range(1, 101):
        note_retry(evidence, failed(attempt))
    attempts = [r["attempt"] for r in evidence["retries"]]
    assert evidence["failed_attempts"] == 100
    assert attempts == list(range(1, KEEP_FIRST + 1)) + list(range(101 - KEEP_LAST, 101))


def test_a_very_long_failure_message_is_cut() -> None:
    evidence: dict[str, Any] = {}
    note_retry(evidence, failed(1, "x" * 10_000))
    assert len(evidence["retries"][0]["failure"]) == 500


async def test_the_worker_signals_each_failed_attempt_to_its_workflow_before_the_retry(
    ts_env: WorkflowEnvironment,
) -> None:
    reports = await run_reported(ts_env, RetriedThenDone, flaky_patch)
    # Each failure once: the retries on the same worker know it reported them.
    assert [(r.activity, r.attempt, r.retry_in_s, r.final) for r in reports] == [
        ("flaky_patch", 1, 2.0, False),
        ("flaky_patch", 2, 2.0, False),
    ]
    assert reports[1].failure.endswith("429 Too Many Requests (attempt 2)")


def test_one_attempt_reported_by_itself_and_by_its_retry_counts_once() -> None:
    evidence: dict[str, Any] = {}
    note_retry(evidence, failed(1))
    note_retry(evidence, failed(1, "no result: the worker running it was lost"))
    note_retry(evidence, failed(1, activity_id="8"))  # another activity's first attempt
    assert evidence["failed_attempts"] == 2
    assert [(r["activity_id"], r["attempt"]) for r in evidence["retries"]] == [("7", 1), ("8", 1)]


async def run_reported(
    env: WorkflowEnvironment, workflow: Any, activity_fn: Any
) -> list[AttemptFailed]:
    task_queue = f"tq-{uuid.uuid4()}"
    reporter = AttemptReporter(env.client, workflow_types=frozenset({workflow.__name__}))
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[workflow],
        activities=[activity_fn],
        interceptors=[reporter],
    ):
        return await env.client.execute_workflow(
            workflow.run,
            2,
            id=f"retried-{uuid.uuid4()}",
            task_queue=task_queue,
            result_type=list[AttemptFailed],
        )


async def test_an_attempt_that_never_came_back_is_reported_by_the_attempt_that_retries_it(
    ts_env: WorkflowEnvironment,
) -> None:
    reports = await run_reported(ts_env, StalledThenDone, stalls_once)
    assert [(r.activity, r.attempt, r.failure) for r in reports] == [("stalls_once", 1, NO_RESULT)]
