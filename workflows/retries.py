"""Retries in the timeline: what a failed activity attempt adds to the running step's entry.

Called from `ReplicaLossWorkflow.attempt_failed` (the signal `worker/attempts.py` sends
when an attempt fails and Temporal will retry it). Pure: it edits the entry's evidence
dict, so the `status` query and the report show how often a step had to try and why.
"""

from __future__ import annotations

from typing import Any

from workflows.types import AttemptFailed

# A step retrying through a long outage keeps its first failures and its latest ones;
# the count says how many there were in all.
KEEP_FIRST = 5
KEEP_LAST = 15


def note_retry(evidence: dict[str, Any], report: AttemptFailed) -> None:
    """Record one failed attempt in a timeline entry's evidence (bounded, each once)."""
    retries: list[dict[str, Any]] = evidence.setdefault("retries", [])
    # The attempt that failed and the worker that retried it can both report it.
    if report.activity_id is not None and any(
        r.get("activity_id") == report.activity_id and r["attempt"] == report.attempt
        for r in retries
    ):
        return
    evidence["failed_attempts"] = int(evidence.get("failed_attempts", 0)) + 1
    retries.append(
        {
            "activity": report.activity,
            "activity_id": report.activity_id,
            "attempt": report.attempt,
            "failure": report.failure[:500],
            "retry_in_s": report.retry_in_s,
            "final": report.final,
        }
    )
    if len(retries) > KEEP_FIRST + KEEP_LAST:
        del retries[KEEP_FIRST : len(retries) - KEEP_LAST]
