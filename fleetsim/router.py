"""The gateway in front of each pool: routing set, weights, shedding, retries, counters.

Driven by `fleetsim.traffic` (one call per generated request) and read by the drill
through `Fleet.counters`. It reads what fleetmend's activities change:

* the routing set is the Service's EndpointSlices, endpoints whose `conditions.ready`
  is not false, further restricted to pods that still carry the router-only label
  `serving=true` (removing it deroutes a pod at once);
* each pod's weight is the `router.fleetmend.io/weight` annotation (absent: 100);
* the Service's `gateway.fleetmend.io/shed-tier` annotation picks the degradation step.

The retry contract is the runbook's: a request may go to another replica only before
its first byte reached the caller; after that a failure is a terminated stream, not a
silent replay (unless `replay_after_first_byte` is set, to show what that costs).
Every wait is measured on the fleet's clock, so "late" means past the deadline in
simulated seconds.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from fleetsim.clock import Clock
from fleetsim.contract import (
    ANNOTATION_FALLBACK_SERVICE,
    ANNOTATION_ROUTER_WEIGHT,
    ANNOTATION_SHED_TIER,
    DEFAULT_ROUTER_WEIGHT,
    LABEL_SERVING,
    SERVING_TRUE,
    ShedTier,
)
from fleetsim.kube.store import Event, Store
from fleetsim.replica import HEADER_ARRIVED_AT, HEADER_QUEUE_WAIT

RETRY_AFTER_S = 5


@dataclass(frozen=True)
class Endpoint:
    pod: str
    ip: str
    port: int
    weight: float


@dataclass(frozen=True)
class RoutingTable:
    endpoints: tuple[Endpoint, ...]
    shed_tier: int
    fallback: str | None


@dataclass
class TrafficRequest:
    id: str
    namespace: str
    service: str
    stream: bool = True
    max_tokens: int | None = None
    priority: str = "high"  # "low" is what shed tier 3 refuses first
    action_id: str | None = None
    deadline_s: float = 30.0
    timeout_s: float = 120.0
    # When the request was offered, on the fleet clock (the traffic generator's
    # schedule); None: when the router got it.
    arrived_at: float | None = None


@dataclass
class Counters:
    """What happened to the requests, fleet-wide and per pod.

    offered      requests generated
    served       completed in full
    late         served, but the first byte came after the deadline
    failed       never got a first byte (no endpoint, every attempt failed, timeout)
    retried      requests that went to another replica before their first byte
    retries      extra attempts in total
    terminated   broke after the first byte (terminal stream error)
    replayed     re-sent after the first byte (only with replay_after_first_byte)
    shed         refused by the gateway (tier 3 429 + Retry-After, tier 4 feature off)
    degraded     served with tier 1 parameters or via the tier 2 fallback model
    no_endpoint  found nothing routable (counted within failed)

    Per lost replica, keyed (namespace, pod) of the replica that failed the attempt:
    retried_from_pod     requests sent on to another replica after this one failed
                         before their first byte
    terminated_on_pod    streams this replica broke after their first byte
    """

    offered: int = 0
    served: int = 0
    late: int = 0
    failed: int = 0
    retried: int = 0
    retries: int = 0
    terminated: int = 0
    replayed: int = 0
    shed: int = 0
    degraded: int = 0
    no_endpoint: int = 0
    in_flight: int = 0
    served_by_pod: Counter[str] = field(default_factory=Counter)
    # Attempts sent to each pod, counted when routed (not when served), so a drill can tell
    # whether anything went to an endpoint after it left the ready set.
    routed_by_pod: Counter[str] = field(default_factory=Counter)
    late_by_pod: Counter[str] = field(default_factory=Counter)
    max_wait_by_pod: dict[str, float] = field(default_factory=dict)
    failed_by_reason: Counter[str] = field(default_factory=Counter)
    retried_from_pod: Counter[tuple[str, str]] = field(default_factory=Counter)
    terminated_on_pod: Counter[tuple[str, str]] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        return {
            "offered": self.offered,
            "served": self.served,
            "late": self.late,
            "failed": self.failed,
            "retried": self.retried,
            "retries": self.retries,
            "terminated": self.terminated,
            "replayed": self.replayed,
            "shed": self.shed,
            "degraded": self.degraded,
            "no_endpoint": self.no_endpoint,
            "in_flight": self.in_flight,
            "served_by_pod": dict(self.served_by_pod),
            "routed_by_pod": dict(self.routed_by_pod),
            "late_by_pod": dict(self.late_by_pod),
            "max_wait_by_pod": dict(self.max_wait_by_pod),
            "failed_by_reason": dict(self.failed_by_reason),
            "retried_from_pod": {
                f"{ns}/{pod}": n for (ns, pod), n in self.retried_from_pod.items()
            },
            "terminated_on_pod": {
                f"{ns}/{pod}": n for (ns, pod), n in self.terminated_on_pod.items()
            },
        }


class _AttemptFailed(Exception):
    """Nothing reached the caller: another replica may take the request."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _StreamBroken(Exception):
    """The replica failed after the first byte was committed to the caller."""


class Router:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        client: httpx.AsyncClient | None = None,
        max_attempts: int = 3,
        replay_after_first_byte: bool = False,
        seed: int = 0,
    ) -> None:
        self.store = store
        self.clock = clock
        self.client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=2.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=200),
        )
        self._own_client = client is None
        self.max_attempts = max_attempts
        self.replay_after_first_byte = replay_after_first_byte
        self.counters = Counters()
        self._random = random.Random(seed)
        self._tables: dict[tuple[str, str], RoutingTable] = {}
        self._unsubscribe = [
            store.subscribe(self._invalidate, resource=r)
            for r in ("pods", "services", "endpointslices")
        ]

    async def aclose(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        if self._own_client:
            await self.client.aclose()

    def _invalidate(self, event: Event) -> None:
        # Any change can move an endpoint; tables are cheap to rebuild on next use.
        self._tables.clear()

    # --- the routing set ---------------------------------------------------------------

    def table(self, namespace: str, service: str) -> RoutingTable:
        key = (namespace, service)
        cached = self._tables.get(key)
        if cached is None:
            cached = self._build(namespace, service)
            self._tables[key] = cached
        return cached

    def _build(self, namespace: str, service: str) -> RoutingTable:
        svc = self.store.try_get("services", service, namespace=namespace)
        if svc is None:
            return RoutingTable((), 0, None)
        annotations = svc["metadata"].get("annotations") or {}
        tier = _int(annotations.get(ANNOTATION_SHED_TIER), 0)
        pods = {
            p["metadata"]["name"]: p
            for p in self.store.list(
                "pods", namespace=namespace, label_selector=f"{LABEL_SERVING}={SERVING_TRUE}"
            )
        }
        endpoints: list[Endpoint] = []
        slices = self.store.list(
            "endpointslices",
            namespace=namespace,
            label_selector=f"kubernetes.io/service-name={service}",
        )
        for sl in slices:
            port = next((p.get("port") for p in sl.get("ports") or [] if p.get("port")), None)
            for ep in sl.get("endpoints") or []:
                # A nil `ready` means ready, as the EndpointSlice API defines it.
                if (ep.get("conditions") or {}).get("ready") is False:
                    continue
                ref = ep.get("targetRef") or {}
                pod = pods.get(str(ref.get("name")))
                addresses = ep.get("addresses") or []
                if pod is None or not addresses:
                    continue
                pod_port = _container_port(pod) or port
                if pod_port is None:
                    continue
                weight = _float(
                    (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ROUTER_WEIGHT),
                    DEFAULT_ROUTER_WEIGHT,
                )
                if weight > 0:
                    endpoints.append(
                        Endpoint(pod["metadata"]["name"], addresses[0], pod_port, weight)
                    )
        fallback = annotations.get(ANNOTATION_FALLBACK_SERVICE)
        return RoutingTable(tuple(sorted(endpoints, key=lambda e: e.pod)), tier, fallback)

    def _pick(self, table: RoutingTable, exclude: set[str]) -> Endpoint | None:
        choices = [e for e in table.endpoints if e.pod not in exclude]
        if not choices:
            return None
        return self._random.choices(choices, weights=[e.weight for e in choices])[0]

    # --- one request -------------------------------------------------------------------

    async def handle(self, req: TrafficRequest) -> str:
        """Route one request to completion; returns its outcome (a Counters field name)."""
        c = self.counters
        c.offered += 1
        c.in_flight += 1
        try:
            return await self._handle(req)
        finally:
            c.in_flight -= 1

    async def _handle(self, req: TrafficRequest) -> str:
        c = self.counters
        table = self.table(req.namespace, req.service)
        tier = table.shed_tier
        if tier >= ShedTier.FEATURE_OFF or (tier >= ShedTier.QUEUE_429 and req.priority == "low"):
            c.shed += 1
            return "shed"
        degraded = False
        if tier >= ShedTier.PARAMETER_DEGRADE:
            degraded = True
            req.stream = False
            req.max_tokens = max(1, (req.max_tokens or 8) // 2)
        if tier >= ShedTier.MODEL_FALLBACK and table.fallback:
            fallback = self.table(req.namespace, table.fallback)
            if fallback.endpoints:
                table = fallback
        started = self.clock.now()
        tried: set[str] = set()
        attempt = 0
        replays = 0
        replaying = False
        last_error = ""
        failed_on: str | None = None
        while True:
            endpoint = self._pick(table, tried)
            if endpoint is None:
                if not tried:
                    c.no_endpoint += 1
                    c.failed_by_reason["no endpoint"] += 1
                else:
                    c.failed_by_reason[f"every endpoint failed ({last_error})"] += 1
                c.failed += 1
                return "failed"
            tried.add(endpoint.pod)
            if failed_on is not None:
                # Counted against the replica that failed, once the retry is really sent.
                c.retried_from_pod[req.namespace, failed_on] += 1
                failed_on = None
            c.routed_by_pod[endpoint.pod] += 1
            attempt += 1
            if attempt > 1 and not replaying:
                c.retries += 1
                if attempt == 2:
                    c.retried += 1
            replaying = False
            attempt_start = self.clock.now()
            remaining = req.timeout_s - (attempt_start - started)
            try:
                queue_wait = await self._attempt(
                    endpoint, req, remaining, _sent_at(req, started, attempt_start)
                )
            except _AttemptFailed as err:
                last_error = err.reason
                if attempt >= self.max_attempts or self.clock.now() - started >= req.timeout_s:
                    c.failed += 1
                    c.failed_by_reason[err.reason] += 1
                    return "failed"
                failed_on = endpoint.pod
                continue
            except _StreamBroken:
                if self.replay_after_first_byte and replays < self.max_attempts:
                    replays += 1
                    replaying = True
                    c.replayed += 1
                    continue
                c.terminated += 1
                c.terminated_on_pod[req.namespace, endpoint.pod] += 1
                return "terminated"
            # Time lost on failed attempts counts against the deadline too.
            wait = (attempt_start - started) + queue_wait
            pod = endpoint.pod
            c.served += 1
            c.served_by_pod[pod] += 1
            c.max_wait_by_pod[pod] = max(c.max_wait_by_pod.get(pod, 0.0), wait)
            if degraded:
                c.degraded += 1
            if wait > req.deadline_s:
                c.late += 1
                c.late_by_pod[pod] += 1
                return "late"
            return "served"

    async def _attempt(
        self, endpoint: Endpoint, req: TrafficRequest, remaining_s: float, sent_at: float | None
    ) -> float:
        """One try against one replica. Returns the replica's reported queue wait."""
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": "hello"}],
            "stream": req.stream,
        }
        if req.max_tokens is not None:
            body["max_tokens"] = req.max_tokens
        if req.action_id is not None:
            body["action"] = {"operation_id": req.action_id, "kind": "tool"}
        url = f"http://{endpoint.ip}:{endpoint.port}/v1/chat/completions"
        headers = {"x-request-id": req.id}
        if sent_at is not None:
            headers[HEADER_ARRIVED_AT] = repr(sent_at)
        state: dict[str, float] = {}
        work = asyncio.ensure_future(self._exchange(url, body, headers, state))
        work.add_done_callback(_consume)
        timer = asyncio.ensure_future(self.clock.sleep(max(0.0, remaining_s)))
        try:
            await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not work.done():
                work.cancel()
        if not work.done():
            # The caller's timeout: before the first byte nothing was committed.
            if "first_byte" in state:
                raise _StreamBroken()
            raise _AttemptFailed("timeout before first byte")
        work.result()  # re-raises _AttemptFailed / _StreamBroken
        return state["queue_wait"]

    async def _exchange(
        self, url: str, body: dict[str, Any], headers: dict[str, str], state: dict[str, float]
    ) -> None:
        try:
            async with self.client.stream("POST", url, json=body, headers=headers) as resp:
                if resp.status_code != 200:
                    await resp.aread()
                    raise _AttemptFailed(f"HTTP {resp.status_code}")
                state["first_byte"] = self.clock.now()
                state["queue_wait"] = _float(resp.headers.get(HEADER_QUEUE_WAIT), 0.0)
                try:
                    done = False
                    async for line in resp.aiter_lines():
                        if line == "data: [DONE]":
                            done = True
                    if body["stream"] and not done:
                        raise _StreamBroken()
                except httpx.HTTPError as err:
                    raise _StreamBroken() from err
        except httpx.HTTPError as err:
            if "first_byte" in state:
                raise _StreamBroken() from err
            raise _AttemptFailed(type(err).__name__) from err


def _sent_at(req: TrafficRequest, started: float, attempt_start: float) -> float | None:
    """The attempt's arrival at its replica on the offered schedule: the request's own
    arrival, plus the time its earlier attempts took.

    A re-send does not count from the original arrival: the replica it goes to did not
    have it then (placing it there would hand it idle capacity it never saw), vLLM's TTFT
    counts from the engine's own arrival, and the router already adds the failed
    attempts' time to the wait it judges against the deadline. What is left out is only
    the lag between the schedule and the router picking the request up: the simulator's.
    """
    if req.arrived_at is None:
        return None
    return req.arrived_at + (attempt_start - started)


def _consume(task: asyncio.Future[None]) -> None:
    # Outcomes are read through `work.result()` when they matter; an attempt abandoned
    # on timeout or shutdown must not log "exception was never retrieved".
    if not task.cancelled():
        task.exception()


def _container_port(pod: dict[str, Any]) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("containerPort"):
                return int(port["containerPort"])
    return None


def _float(value: Any, default: float) -> float:
    try:
        return max(0.0, float(value)) if value is not None else default
    except (TypeError, ValueError):
        return default


def _int(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default
