"""Kubernetes reads held in fleetsim's API server while a test looks at what is running.

A quick read-only activity finishes between two polls of its workflow's pending
activities, and its first request may be one an earlier step makes too, so neither a
poll nor "hang the first such request" singles it out. `GatedReads` sits in front of the
server's `Chaos.handle`: each read that `Reads` matches waits for `inspect(request)`
(which may SIGKILL the worker) and is then served as usual. The activity that sent a
held read is still running, so it is pending on the server while `inspect` looks, and a
read from any other step is only delayed, never failed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.responses import Response

from fleetsim.kube.chaos import Chaos, RequestInfo, Verb

Inspect = Callable[[RequestInfo], Awaitable[None]]


@dataclass(frozen=True)
class Reads:
    """The requests to hold: one verb on one resource in one namespace."""

    verb: Verb
    resource: str
    namespace: str = "serving"

    def match(self, req: RequestInfo) -> bool:
        return (req.verb, req.resource, req.namespace) == (
            self.verb,
            self.resource,
            self.namespace,
        )


class GatedReads:
    def __init__(self, chaos: Chaos, inspect: Inspect) -> None:
        self.gates: list[Reads] = []
        self.held = 0  # reads held so far, to show the gate was in the path
        self._inspect = inspect
        self._serve = chaos.handle
        chaos.handle = self._handle  # type: ignore[method-assign]

    async def _handle(
        self,
        req: RequestInfo,
        body: Callable[[], Awaitable[bytes]],
        serve: Callable[[], Awaitable[Response]],
    ) -> Response:
        if any(gate.match(req) for gate in self.gates):
            self.held += 1
            await self._inspect(req)
        return await self._serve(req, body, serve)
