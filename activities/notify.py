"""Incident channel messages: a configurable JSON webhook with a Slack-compatible body.

Called from `workflows/replica_loss.py` at each milestone (severity, lead time, warm floor,
recovery). Messages carry numbers, not adjectives: every fact is a named value with its
unit. Posting is an external effect, so it goes through the ledger: a retried step does
not post twice.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel, Field
from temporalio import activity

from activities.common import (
    MUTATING_HEARTBEAT_S,
    ConfirmFn,
    EffectRunnerLike,
    MutatingInput,
    MutatingResult,
    activity_options,
    run_effect,
)
from activities.errors import http_errors
from activities.redact import redact_url


class Fact(BaseModel):
    name: str
    value: float | int | str
    unit: str = ""


class NotifyInput(MutatingInput):
    title: str
    facts: list[Fact] = Field(default_factory=list)
    text: str = ""


class NotifyResult(MutatingResult):
    delivered: bool
    status_code: int | None
    body: dict[str, Any]
    applied_now: bool
    skipped_reason: str | None = None


NOTIFY_OPTIONS = activity_options(
    start_to_close=30, heartbeat=MUTATING_HEARTBEAT_S, max_attempts=10
)


def format_value(fact: Fact) -> str:
    value = fact.value
    if isinstance(value, float):
        text = f"{value:.0f}" if value.is_integer() else f"{value:.3g}"
    else:
        text = str(value)
    return f"{text} {fact.unit}".strip()


def message_body(input: NotifyInput) -> dict[str, Any]:
    """The webhook body: Slack's `text` and `blocks`, plus the facts as typed JSON."""
    lines = [f"*{input.title}*"] + [f"• {f.name}: {format_value(f)}" for f in input.facts]
    if input.text:
        lines.append(input.text)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": input.title[:150]}}
    ]
    # Slack allows at most ten fields per section.
    for i in range(0, len(input.facts), 10):
        blocks.append(
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*{f.name}*\n{format_value(f)}"}
                    for f in input.facts[i : i + 10]
                ],
            }
        )
    if input.text:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": input.text[:3000]}})
    return {
        "text": "\n".join(lines),
        "blocks": blocks,
        "fleetmend": {
            "incident_id": input.incident_id,
            "op_id": input.op_id,
            "title": input.title,
            "facts": [f.model_dump() for f in input.facts],
        },
    }


def lead_time_facts(seconds: float, source: str, samples: int, warm_floor: int) -> list[Fact]:
    """The provisioning announcement: how long until capacity, as a number, and from what."""
    return [
        Fact(name="provisioning lead time", value=round(seconds, 1), unit="s"),
        Fact(name="lead time minutes", value=round(seconds / 60.0, 1), unit="min"),
        Fact(name="estimate source", value=source),
        Fact(name="past startups observed", value=samples),
        Fact(name="warm replicas available", value=warm_floor),
    ]


def acknowledgement(runner: EffectRunnerLike, seen: dict[str, int]) -> ConfirmFn:
    """Evidence that the channel took the message: a 2xx this attempt saw, or one recorded.

    A webhook cannot be read back: the receiver's 2xx, which `apply` requires before the
    ledger records it applied, is the only observation there is. Without it a delivered
    message would stay unconfirmed and reconciliation would call it an orphan. A retry
    whose earlier attempt died mid-POST has no 2xx to show, so it posts again under the
    same Idempotency-Key (the receiver dedupes on it) rather than call a message nobody
    acknowledged delivered: an incident channel can take a repeat, not a silent loss.
    """

    def confirm(op_id: str) -> dict[str, Any] | None:
        status = seen.get(op_id)
        if status is None:
            ledger = getattr(runner, "ledger", None)
            record = ledger.get(op_id) if ledger is not None else None
            if record is not None and record.state in ("applied", "confirmed"):
                status = (record.result or {}).get("status_code")
        return None if status is None else {"acknowledged": "2xx", "status_code": status}

    return confirm


class NotifyActivities:
    """Posts to the incident channel webhook."""

    def __init__(self, http: httpx.Client, url: str | None, runner: EffectRunnerLike) -> None:
        self.http = http
        self.url = url
        self.runner = runner

    @activity.defn
    def notify_incident_channel(self, input: NotifyInput) -> NotifyResult:
        """Post one message (Slack-compatible JSON), once per operation id."""
        body = message_body(input)
        if not self.url:
            # A fleet without an incident channel (a drill, a laptop) still recovers; the
            # message is returned so the workflow's status and report can show it.
            return NotifyResult(
                delivered=False,
                status_code=None,
                body=body,
                applied_now=False,
                skipped_reason="no incident channel webhook configured",
            )
        url = self.url
        seen: dict[str, int] = {}  # op id -> the 2xx this attempt's POST got

        def apply(op_id: str) -> dict[str, Any]:
            # A Slack-style webhook's path is its secret: only the host is ever named.
            with http_errors("post to incident channel", redact_url(url, keep_path=False)):
                response = self.http.post(
                    url,
                    json=body,
                    # Receivers that deduplicate can use it; the ledger already does.
                    headers={"Idempotency-Key": op_id},
                )
                response.raise_for_status()
            seen[op_id] = response.status_code
            return {"status_code": response.status_code}

        outcome = run_effect(
            self.runner,
            input,
            kind="notify",
            target="webhook/incident-channel",
            intent={"title": input.title, "facts": [f.model_dump() for f in input.facts]},
            apply=apply,
            confirm=acknowledgement(self.runner, seen),
        )
        status = outcome.result.get("status_code")
        return NotifyResult(
            delivered=status is not None and not input.dry_run,
            status_code=None if status is None else int(status),
            body=body,
            applied_now=outcome.applied_now,
        )
