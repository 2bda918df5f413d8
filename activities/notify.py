"""Incident channel messages: a configurable JSON webhook with a Slack-compatible body.

Called from `workflows/replica_loss.py` at each milestone (severity, lead time, warm floor,
recovery). Messages carry numbers, not adjectives: every fact is a named value with its
unit. Posting is an external effect, so it goes through the ledger: a retried step does
not post twice.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import MutatingInput, activity_options


class Fact(BaseModel):
    name: str
    value: float | int | str
    unit: str = ""


class NotifyInput(MutatingInput):
    title: str
    facts: list[Fact] = Field(default_factory=list)
    text: str = ""


class NotifyResult(BaseModel):
    delivered: bool
    status_code: int | None
    body: dict[str, object]
    applied_now: bool


NOTIFY_OPTIONS = activity_options(start_to_close=30, max_attempts=10)


class NotifyActivities:
    """Posts to the incident channel webhook."""

    @activity.defn
    def notify_incident_channel(self, input: NotifyInput) -> NotifyResult:
        """Post one message (Slack-compatible JSON), once per operation id."""
        raise NotImplementedError
