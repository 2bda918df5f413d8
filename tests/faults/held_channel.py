"""The drill's incident channel, holding chosen messages' first POST until the worker dies.

`HeldChannel` is `worker.drill_channel.IncidentChannel` behind an ASGI wrapper. The n-th
message (by its Idempotency-Key, so a retry's POST of an earlier message is never held)
is held in the way `modes[n]` names, until `release(n)`:

    drop        held before the channel reads it; on release it is refused (503) unread:
                the sender died with the message undelivered
    lose-reply  delivered to the channel at once, its 2xx held: the sender dies with the
                message delivered and no answer seen (the "applied, not recorded" window)
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.responses import JSONResponse

from worker.drill_channel import IncidentChannel

PostMode = Literal["drop", "lose-reply"]
Message = MutableMapping[str, Any]


@dataclass
class HeldPost:
    mode: PostMode
    key: str  # the POST's Idempotency-Key
    released: asyncio.Event = field(default_factory=asyncio.Event)


class HeldChannel(IncidentChannel):
    def __init__(self, modes: list[PostMode]) -> None:
        super().__init__()
        self.modes = modes
        self.held: list[HeldPost] = []

    def release(self, index: int | None = None) -> None:
        """Answer the held POST `index` (every one if None)."""
        for i, post in enumerate(self.held):
            if index is None or i == index:
                post.released.set()

    def arrived(self, index: int) -> HeldPost | None:
        return self.held[index] if index < len(self.held) else None

    def app(self) -> Any:
        inner = super().app()

        async def app(scope: Message, receive: Any, send: Any) -> None:
            key = _idempotency_key(scope)
            if (
                scope["type"] != "http"
                or scope["method"] != "POST"
                or len(self.held) >= len(self.modes)
                or key in {p.key for p in self.held}
            ):
                await inner(scope, receive, send)
                return
            post = HeldPost(self.modes[len(self.held)], key)
            self.held.append(post)
            if post.mode == "drop":
                await post.released.wait()
                refused = JSONResponse({"error": "held, never read"}, status_code=503)
                await refused(scope, receive, send)
                return
            reply: list[Message] = []

            async def keep(message: Message) -> None:
                reply.append(message)

            await inner(scope, receive, keep)
            await post.released.wait()
            for message in reply:
                await send(message)

        return app


def _idempotency_key(scope: Message) -> str:
    headers = dict(scope.get("headers") or [])
    return bytes(headers.get(b"idempotency-key", b"")).decode()
