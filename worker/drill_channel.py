"""The drill's incident channel: a webhook that keeps every message fleetmend posted.

Started by `worker/drill.py` on the fleet's loopback host; the worker's
`FLEETMEND_NOTIFY_WEBHOOK_URL` points at it, so the notification activity posts over HTTP
exactly as it would to Slack, and the drill's result carries what was announced (the
provisioning lead time, a fragmentation diagnosis) for a reviewer or a test to check.
"""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

PATH = "/incident-channel"


class Notification(BaseModel):
    """One message as the channel received it: the Slack text and fleetmend's own facts."""

    # The incident's milestone it announces (`lead-time`, `fragmentation`, `recovered`...),
    # the last part of its operation id.
    milestone: str = ""
    title: str = ""
    text: str = ""
    facts: list[dict[str, Any]] = Field(default_factory=list)

    def fact(self, name: str) -> Any:
        """The value of the fact called `name`, or None."""
        return next((f.get("value") for f in self.facts if f.get("name") == name), None)


def notification_of(body: Any) -> Notification:
    """A posted body read as a notification; a body that is not an object is kept as text."""
    if not isinstance(body, dict):
        return Notification(text=str(body))
    own = body.get("fleetmend")
    if not isinstance(own, dict):
        own = {}
    facts = [f for f in own.get("facts") or [] if isinstance(f, dict)]
    return Notification(
        milestone=str(own.get("op_id", "")).rsplit("/", 1)[-1],
        title=str(own.get("title", "")),
        text=str(body.get("text", "")),
        facts=facts,
    )


class IncidentChannel:
    def __init__(self) -> None:
        self.received: list[Notification] = []
        # The Idempotency-Key of every POST, repeats included: fleetmend posts a message
        # again when a worker died before it saw the 2xx; `received` keeps it once, as a
        # receiver that dedupes on the key shows it.
        self.receipts: list[str] = []
        # A Slack-style webhook's URL is its credential: the drill's carries one too, so a
        # drill shows that no log, report or status query leaks it.
        self.secret = secrets.token_urlsafe(12)

    @property
    def path(self) -> str:
        return f"{PATH}/{self.secret}"

    def app(self) -> Starlette:
        async def post(request: Request) -> JSONResponse:
            if request.path_params["secret"] != self.secret:
                return JSONResponse({"error": "unknown webhook"}, status_code=404)
            try:
                body = await request.json()
            except ValueError:
                return JSONResponse({"error": "the body is not JSON"}, status_code=400)
            key = request.headers.get("idempotency-key", "")
            if not key or key not in self.receipts:
                self.received.append(notification_of(body))
            self.receipts.append(key)
            return JSONResponse({"ok": True})

        return Starlette(routes=[Route(PATH + "/{secret}", post, methods=["POST"])])
