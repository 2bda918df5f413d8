"""Kubernetes API fault injection: answer 5xx, throttle with 429 or hang, for a while.

Called from `fleetsim.kube.server` (every resource request goes through `Chaos.handle`),
switched on by a scenario's `kube-api` fault (`fleetsim.faults`) or by the control app's
`POST /kube-api-faults`. A window matches requests by verb, resource and namespace and,
while it is open, answers each matching request as a sick API server does:

    error     a Status with `status` (500 by default, any 5xx) and nothing applied
    throttle  429 TooManyRequests with a `Retry-After` header, nothing applied
    timeout   the request is held for `hang_s` and then answered 504; with
              `lose_response` a mutating request is applied first, so the client times
              out not knowing it took effect (the case idempotency exists for)

Windows last `for_wall_s` seconds of wall time, not fleet time: the API server's clients
(the worker and its retry back-off) live in real time whatever the fleet's speed.

`MutationLog` counts every mutating request the server answered, per object, verb and the
operation id stamped in the body, and whether it was applied, so a test can show that no
effect was applied twice (`applied_twice()`), counted by the fleet rather than the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.responses import JSONResponse, Response

from fleetsim.kube import mutations

Verb = Literal["get", "list", "watch", "create", "update", "patch", "delete"]
MUTATING_VERBS: tuple[Verb, ...] = ("create", "update", "patch", "delete")
ALL_VERBS: tuple[Verb, ...] = ("get", "list", "watch", *MUTATING_VERBS)


class ApiFault(BaseModel):
    """One window of a sick Kubernetes API, as a scenario or the control app states it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    answer: Literal["error", "throttle", "timeout"]
    for_wall_s: float = Field(30.0, gt=0, description="how long the window stays open (wall s)")
    verbs: list[Verb] = Field(
        default_factory=lambda: list(MUTATING_VERBS), min_length=1, description="matched verbs"
    )
    resources: list[str] = Field(
        default_factory=list,
        description="plural names, optionally with a subresource (pods, deployments/scale); "
        "empty: every resource",
    )
    namespaces: list[str] = Field(
        default_factory=list, description="empty: every namespace and cluster-scoped objects"
    )
    status: int = Field(500, ge=500, le=599, description="error: the 5xx answered")
    retry_after_s: int = Field(2, ge=0, description="throttle: the Retry-After header")
    hang_s: float = Field(60.0, gt=0, description="timeout: how long a request is held")
    lose_response: bool = Field(
        False, description="timeout: apply a mutating request, then hang (the reply is lost)"
    )

    @model_validator(mode="after")
    def _options_fit_answer(self) -> ApiFault:
        if self.lose_response and self.answer != "timeout":
            raise ValueError("lose_response applies to answer: timeout only")
        return self


@dataclass(frozen=True)
class RequestInfo:
    """What a window matches on, taken from the request's URL and method."""

    verb: Verb
    resource: str  # plural, e.g. "pods"
    subresource: str | None
    namespace: str | None
    name: str | None
    dry_run: bool = False

    @property
    def object_ref(self) -> str:
        kind = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = "/".join(part for part in (self.namespace, self.name) if part)
        return f"{kind} {where}".rstrip()


def verb_of(method: str, *, named: bool, watch: bool) -> Verb:
    """The Kubernetes verb of an HTTP request (what RBAC and audit logs call it)."""
    if method == "GET":
        if watch:
            return "watch"
        return "get" if named else "list"
    verbs: dict[str, Verb] = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete",
    }
    try:
        return verbs[method]
    except KeyError:
        raise ValueError(f"no Kubernetes verb for HTTP {method}") from None


@dataclass
class Window:
    fault: ApiFault
    opens_at: float
    closes_at: float
    hits: Counter[str] = field(default_factory=Counter)  # object_ref -> requests answered
    # (clock time, verb, object_ref) of every request answered, to show when clients retried.
    answered: list[tuple[float, str, str]] = field(default_factory=list)

    def matches(self, req: RequestInfo, now: float) -> bool:
        if not self.opens_at <= now < self.closes_at:
            return False
        f = self.fault
        if req.verb not in f.verbs:
            return False
        if f.resources:
            wanted = {req.resource}
            if req.subresource:
                wanted = {f"{req.resource}/{req.subresource}"}
            if not wanted & set(f.resources):
                return False
        return not f.namespaces or req.namespace in f.namespaces

    def describe(self) -> dict[str, Any]:
        return {
            **self.fault.model_dump(mode="json"),
            "open": [round(self.opens_at, 3), round(self.closes_at, 3)],
            "answered": sum(self.hits.values()),
            "by_object": dict(self.hits),
        }


def _status_body(code: int, reason: str, message: str, retry_after: int | None = None) -> Any:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return body


def refusal(fault: ApiFault) -> Response:
    """The answer of an error or throttle window (nothing was applied)."""
    if fault.answer == "throttle":
        seconds = fault.retry_after_s
        body = _status_body(
            429, "TooManyRequests", "the server has received too many requests", seconds
        )
        return JSONResponse(body, status_code=429, headers={"Retry-After": str(seconds)})
    body = _status_body(
        fault.status, "InternalError", "Internal error occurred: injected by fleetsim chaos"
    )
    return JSONResponse(body, status_code=fault.status)


def timed_out() -> Response:
    return JSONResponse(
        _status_body(504, "Timeout", "the request timed out (injected by fleetsim chaos)"),
        status_code=504,
    )


@dataclass(frozen=True)
class Mutation:
    verb: Verb
    object_ref: str
    op_id: str | None
    status: int
    applied: bool
    during: str | None  # the window's answer when one matched, else None


def _document(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def _metadata(body: bytes) -> dict[str, Any]:
    doc = _document(body)
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return meta if isinstance(meta, dict) else {}


def stamped_op_id(body: bytes) -> str | None:
    """The operation id a raw create/update/patch body stamps, if any (bodies may be anything)."""
    return mutations.stamped_op_id(_document(body))


def created_name(req: RequestInfo, body: bytes) -> RequestInfo:
    """A create names its object in the body, not the URL: count it under that name."""
    name = _metadata(body).get("name")
    if req.name is not None or not isinstance(name, str):
        return req
    return RequestInfo(req.verb, req.resource, req.subresource, req.namespace, name, req.dry_run)


class MutationLog:
    """Every mutating request the server answered: what, which op id, applied or not."""

    def __init__(self) -> None:
        self.entries: list[Mutation] = []

    def record(self, mutation: Mutation) -> None:
        self.entries.append(mutation)

    def applied(self) -> Counter[tuple[str, str, str | None]]:
        """(verb, object, op id) -> how many times it took effect."""
        return Counter((m.verb, m.object_ref, m.op_id) for m in self.entries if m.applied)

    def applied_twice(self) -> dict[str, int]:
        """Stamped effects applied more than once (an unstamped change has no identity)."""
        return {
            f"{verb} {ref} op={op}": n
            for (verb, ref, op), n in self.applied().items()
            if op is not None and n > 1
        }

    def refused(self) -> list[Mutation]:
        return [m for m in self.entries if not m.applied]


Sleep = Callable[[float], Awaitable[None]]


class Chaos:
    """The open windows of one API server, and the log of what it mutated."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep | None = None,
    ) -> None:
        self._clock = clock
        self._sleep = sleep or self._hold
        # Made on the serving loop by the first hang; a stopped server's hangs all end.
        self._released: asyncio.Event | None = None
        self.windows: list[Window] = []
        self.mutations = MutationLog()

    async def _hold(self, seconds: float) -> None:
        if self._released is None:
            self._released = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._released.wait(), timeout=seconds)

    def release(self) -> None:
        """End every hang now (the server is stopping); call on the server's loop."""
        if self._released is not None:
            self._released.set()
            self._released = None

    def open(self, fault: ApiFault) -> Window:
        now = self._clock()
        window = Window(fault, opens_at=now, closes_at=now + fault.for_wall_s)
        self.windows.append(window)
        return window

    def close_all(self) -> None:
        now = self._clock()
        for window in self.windows:
            window.closes_at = min(window.closes_at, now)

    def matching(self, req: RequestInfo) -> Window | None:
        now = self._clock()
        return next((w for w in self.windows if w.matches(req, now)), None)

    def describe(self) -> list[dict[str, Any]]:
        return [w.describe() for w in self.windows]

    async def handle(
        self,
        req: RequestInfo,
        body: Callable[[], Awaitable[bytes]],
        serve: Callable[[], Awaitable[Response]],
    ) -> Response:
        """Answer `req` through any open window; `serve` is the healthy server's answer."""
        window = self.matching(req)
        mutating = req.verb in MUTATING_VERBS
        if window is None:
            return await self._served(req, body, serve, during=None)
        window.hits[req.object_ref] += 1
        window.answered.append((self._clock(), req.verb, req.object_ref))
        fault = window.fault
        if fault.answer == "timeout" and fault.lose_response and mutating:
            await self._served(req, body, serve, during=fault.answer)
            await self._sleep(fault.hang_s)
            return timed_out()
        if fault.answer == "timeout":
            await self._sleep(fault.hang_s)
            response = timed_out()
        else:
            response = refusal(fault)
        if mutating:
            self._log(req, await body(), response.status_code, during=fault.answer)
        return response

    async def _served(
        self,
        req: RequestInfo,
        body: Callable[[], Awaitable[bytes]],
        serve: Callable[[], Awaitable[Response]],
        *,
        during: str | None,
    ) -> Response:
        response = await serve()
        if req.verb in MUTATING_VERBS:
            self._log(req, await body(), response.status_code, during=during)
        return response

    def _log(self, req: RequestInfo, raw: bytes, status: int, *, during: str | None) -> None:
        self.mutations.record(
            Mutation(
                verb=req.verb,
                object_ref=created_name(req, raw).object_ref,
                op_id=stamped_op_id(raw),
                status=status,
                # A dry-run request is answered like the real one but changes nothing.
                applied=status < 300 and not req.dry_run,
                during=during,
            )
        )
