"""The Alertmanager intake: an ASGI app that turns firing alerts into incident workflows.

Run by `fleetmend intake` (uvicorn) and, in tests, as a real subprocess. Stateless: two
replicas behind one Service behave the same, because every decision is made from the
request and from Temporal (workflow id per pool + USE_EXISTING, and the alert's dedupe key
`fingerprint@startsAt` carried in the signal so the workflow ignores resends).

Endpoints (OpenAPI at `GET /openapi.json`):
- `POST /alertmanager`: Alertmanager webhook payload version 4. 2xx only after Temporal
  accepted every start/signal of the batch; 503 when Temporal is unreachable (Alertmanager
  retries); 400/422 naming the bad field when nothing in the payload is usable. A batch
  with good and bad alerts: the good ones are accepted (200), the bad ones listed in
  `rejected`, each with the field that made it bad.
- `POST /actions`: the ledger's action boundary for applications (worker/intake_actions.py).
- `GET /healthz` (process up), `GET /readyz` (Temporal answers), `GET /metrics`.

Every path but `/healthz` (the liveness probe) needs the credentials, checked by one
middleware in front of the routes so a route added later cannot be left open; an unknown
path without them is 401 too, so the set of routes is not discoverable.

Secrets: the bearer token and the basic-auth password are compared in constant time and
never logged; the request log names the path, the status and the counts only.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from worker.alerts import (
    MAX_ALERTS_PER_REQUEST,
    AlertRejected,
    LabelMapping,
    MappedFiring,
    MappedResolved,
    WebhookEnvelope,
    dedupe_key,
    map_alert,
    over_limit,
)
from worker.settings import Settings

if TYPE_CHECKING:
    from ledger.store import Ledger
from workflows.types import (
    SIGNAL_ALERT_RESOLVED,
    SIGNAL_REPLICA_LOST,
    WORKFLOW_NAME,
    AlertResolved,
    IncidentInput,
    LostReplica,
    incident_workflow_id,
)

log = logging.getLogger("fleetmend.intake")

MAX_BODY_BYTES = 4 * 1024 * 1024


class IntakeOptions(BaseSettings):
    """Intake-only knobs, env FLEETMEND_INTAKE_*; the shared ones live in worker.settings."""

    model_config = SettingsConfigDict(env_prefix="FLEETMEND_INTAKE_", extra="ignore")

    temporal_timeout_s: float = Field(
        5.0,
        gt=0,
        description="Per-call deadline to Temporal; past it the request answers 503.",
    )
    closed_history_events: int = Field(
        2000,
        ge=0,
        description=(
            "Events of a closed incident read to find whether a resent alert was already "
            "handled by it (repeat_interval after the incident ended)."
        ),
    )


def incident_input(settings: Settings, lost: LostReplica) -> IncidentInput:
    """The incident's start argument: the pool, the safety limits and the (scaled) waits."""
    defaults = IncidentInput(namespace=lost.namespace, pool=lost.pool)
    scale = settings.time_scale
    return IncidentInput(
        namespace=lost.namespace,
        pool=lost.pool,
        dry_run=lost.dry_run or settings.dry_run,
        ramp=settings.ramp,
        blast_radius_fraction=settings.blast_radius_fraction,
        auto_shed_tier_limit=settings.auto_shed_tier_limit,
        gate_timeout_s=settings.gate_timeout_s / scale,
        cooldown_s=defaults.cooldown_s / scale,
        cooldown_max_s=defaults.cooldown_max_s / scale,
        probe_window_s=defaults.probe_window_s / scale,
        replacement_wait_s=defaults.replacement_wait_s / scale,
        ramp_step_interval_s=defaults.ramp_step_interval_s / scale,
        verify_interval_s=defaults.verify_interval_s / scale,
        verify_window_s=max(1.0, defaults.verify_window_s / scale),
    )


class TemporalUnavailable(Exception):
    """Temporal did not answer in time: the whole request is answered 503, to be retried."""


# The one Temporal answer that means "this request is wrong" rather than "not now". Every
# other refusal (namespace not found, permission denied, overloaded) is the deployment's
# problem, not the alert's: answered 503 so Alertmanager keeps the alert and retries.
_REQUEST_AT_FAULT = {RPCStatusCode.INVALID_ARGUMENT}


class TemporalGateway:
    """One lazily connected Temporal client, reconnected after a failed first connect."""

    def __init__(self, settings: Settings, *, timeout_s: float, client: Client | None = None):
        self._settings = settings
        self._timeout = timeout_s
        self._client = client
        self._lock = asyncio.Lock()

    @property
    def rpc_timeout(self) -> timedelta:
        return timedelta(seconds=self._timeout)

    async def client(self) -> Client:
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await asyncio.wait_for(
                        Client.connect(
                            self._settings.temporal_address,
                            namespace=self._settings.temporal_namespace,
                            data_converter=pydantic_data_converter,
                        ),
                        timeout=self._timeout,
                    )
                except (TimeoutError, RuntimeError, RPCError, OSError) as exc:
                    raise TemporalUnavailable(f"cannot connect: {type(exc).__name__}") from exc
            return self._client

    async def ready(self) -> bool:
        try:
            client = await self.client()
            await asyncio.wait_for(
                client.service_client.check_health(timeout=self.rpc_timeout),
                timeout=self._timeout,
            )
        except (TemporalUnavailable, RPCError, TimeoutError, RuntimeError):
            return False
        return True

    async def call(self, make: Callable[[Client], Awaitable[Any]]) -> Any:
        """Run one Temporal call; a transport-level failure becomes TemporalUnavailable."""
        client = await self.client()
        try:
            return await asyncio.wait_for(make(client), timeout=self._timeout * 2)
        except TimeoutError as exc:
            raise TemporalUnavailable("deadline exceeded") from exc
        except RPCError as exc:
            if exc.status in _REQUEST_AT_FAULT:
                raise
            if exc.status not in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                log.error("temporal refused: %s %s", exc.status.name, exc.message)
            raise TemporalUnavailable(f"{exc.status.name}: {exc.message}") from exc


class IntakeMetrics:
    """The intake's Prometheus series, on a registry of its own (one per app instance)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.received = Counter(
            "fleetmend_intake_alerts_received",
            "Alerts received from Alertmanager, by alert status.",
            ["status"],
            registry=registry,
        )
        self.accepted = Counter(
            "fleetmend_intake_alerts_accepted",
            "Alerts accepted, by outcome (started, signalled, duplicate, resolved, "
            "resolved_without_incident).",
            ["outcome"],
            registry=registry,
        )
        self.rejected = Counter(
            "fleetmend_intake_alerts_rejected",
            "Alerts or requests rejected, by reason.",
            ["reason"],
            registry=registry,
        )
        self.incidents_started = Counter(
            "fleetmend_intake_incidents_started",
            "Incident workflows started (a signal to an open incident is not counted).",
            registry=registry,
        )
        self.truncated = Counter(
            "fleetmend_intake_truncated_alerts",
            "Alerts Alertmanager left out of a notification (max_alerts), never seen here.",
            registry=registry,
        )
        self.temporal_unavailable = Counter(
            "fleetmend_intake_temporal_unavailable",
            "Requests answered 503 because Temporal did not accept in time.",
            registry=registry,
        )
        self.latency = Histogram(
            "fleetmend_intake_request_duration_seconds",
            "Request latency by route and status code.",
            ["route", "code"],
            registry=registry,
        )


class AcceptedAlert(BaseModel):
    index: int
    workflow_id: str
    outcome: Literal["started", "signalled", "duplicate", "resolved", "resolved_without_incident"]
    dedupe_key: str


class IntakeResult(BaseModel):
    """Body of every answer to `POST /alertmanager` that got past authentication."""

    status: Literal["accepted", "partial", "rejected"]
    accepted: list[AcceptedAlert] = Field(default_factory=list)
    rejected: list[AlertRejected] = Field(default_factory=list)
    truncated_alerts: int = 0


class ErrorBody(BaseModel):
    error: str
    field: str | None = None
    detail: str | None = None


@dataclass
class IntakeState:
    settings: Settings
    options: IntakeOptions
    mapping: LabelMapping
    gateway: TemporalGateway
    metrics: IntakeMetrics
    bearer: bytes | None
    basic: tuple[bytes, bytes] | None


def _authorised(state: IntakeState, header: str | None) -> bool:
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and state.bearer is not None:
        return hmac.compare_digest(value.encode(), state.bearer)
    if scheme.lower() == "basic" and state.basic is not None:
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(b":")
        # Both compared always, so the time taken does not tell which half was wrong.
        ok_user = hmac.compare_digest(user, state.basic[0])
        ok_password = hmac.compare_digest(password, state.basic[1])
        return bool(sep) and ok_user and ok_password
    return False


def _unauthorised(state: IntakeState) -> JSONResponse:
    schemes = []
    if state.bearer is not None:
        schemes.append('Bearer realm="fleetmend"')
    if state.basic is not None:
        schemes.append('Basic realm="fleetmend"')
    state.metrics.rejected.labels(reason="unauthorised").inc()
    return JSONResponse(
        ErrorBody(error="unauthorised").model_dump(exclude_none=True),
        status_code=401,
        headers={"WWW-Authenticate": ", ".join(schemes)},
    )


async def read_json(request: Request) -> tuple[Any, JSONResponse | None]:
    """The body as JSON, or the 4xx answer that says why it is not."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None, JSONResponse(
            ErrorBody(error="payload too large", detail=f"limit {MAX_BODY_BYTES} bytes").model_dump(
                exclude_none=True
            ),
            status_code=413,
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None, JSONResponse(
                ErrorBody(
                    error="payload too large", detail=f"limit {MAX_BODY_BYTES} bytes"
                ).model_dump(exclude_none=True),
                status_code=413,
            )
    try:
        return json.loads(body), None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, JSONResponse(
            ErrorBody(error="body is not JSON", detail=str(exc)).model_dump(exclude_none=True),
            status_code=400,
        )


def validation_error(exc: ValidationError, prefix: str = "") -> JSONResponse:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "body"
    return JSONResponse(
        ErrorBody(error="invalid payload", field=f"{prefix}{field}", detail=err["msg"]).model_dump(
            exclude_none=True
        ),
        status_code=422,
    )


async def _closed_run_keys(state: IntakeState, handle: WorkflowHandle[Any, Any]) -> set[str]:
    """Dedupe keys of the replica_lost signals a closed incident already received."""
    keys: set[str] = set()
    seen = 0
    converter = pydantic_data_converter.payload_converter
    client = await state.gateway.client()
    async for event in client.get_workflow_handle(
        handle.id, run_id=handle.run_id
    ).fetch_history_events(rpc_timeout=state.gateway.rpc_timeout):
        seen += 1
        if seen > state.options.closed_history_events:
            break
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        attrs = event.workflow_execution_signaled_event_attributes
        if attrs.signal_name != SIGNAL_REPLICA_LOST or not attrs.input.payloads:
            continue
        try:
            lost = converter.from_payloads(attrs.input.payloads, [LostReplica])[0]
        except Exception:  # an undecodable old signal cannot match this alert anyway
            continue
        keys.add(dedupe_key(lost.fingerprint, lost.starts_at))
    return keys


def _no_such_workflow(exc: RPCError) -> bool:
    # NOT_FOUND also answers for a missing namespace: that is a deployment error to retry,
    # not "no incident open".
    return exc.status == RPCStatusCode.NOT_FOUND and "namespace" not in exc.message.lower()


def _started_a_run(handle: WorkflowHandle[Any, Any], running_run_id: str | None) -> bool:
    """Whether signal-with-start started a run or signalled the open one.

    The server says so exactly in the response's `started` (two intake replicas racing on
    one pool both see "no incident" in describe, only one starts); the SDK keeps the
    response on the handle without a public accessor, hence the fallback on run ids.
    """
    response = getattr(handle, "_start_workflow_response", None)
    if response is not None and hasattr(response, "started"):
        return bool(response.started)
    return handle.result_run_id != running_run_id


async def _deliver_pool(
    state: IntakeState, items: list[MappedFiring], accepted: list[AcceptedAlert]
) -> None:
    """Start or signal one pool's incident, alert by alert, in the order they arrived."""
    first = items[0].lost
    wid = incident_workflow_id(first.namespace, first.pool)
    timeout = state.gateway.rpc_timeout

    async def describe(client: Client) -> Any:
        try:
            return await client.get_workflow_handle(wid).describe(rpc_timeout=timeout)
        except RPCError as exc:
            if _no_such_workflow(exc):
                return None
            raise

    description = await state.gateway.call(describe)
    closed_keys: set[str] = set()
    if description is not None and description.status != WorkflowExecutionStatus.RUNNING:
        # A resend after the incident ended (repeat_interval) must not open a second one.
        handle = (await state.gateway.client()).get_workflow_handle(wid, run_id=description.run_id)
        closed_keys = await state.gateway.call(lambda _c: _closed_run_keys(state, handle))

    running_run_id = (
        description.run_id
        if description is not None and description.status == WorkflowExecutionStatus.RUNNING
        else None
    )
    for item in items:
        key = item.dedupe_key
        if key in closed_keys:
            accepted.append(
                AcceptedAlert(
                    index=item.index, workflow_id=wid, outcome="duplicate", dedupe_key=key
                )
            )
            state.metrics.accepted.labels(outcome="duplicate").inc()
            continue
        lost = item.lost
        incident = incident_input(state.settings, lost)

        async def start(
            client: Client, lost: LostReplica = lost, incident: IncidentInput = incident
        ) -> Any:
            return await client.start_workflow(
                WORKFLOW_NAME,
                incident,
                id=wid,
                task_queue=state.settings.task_queue,
                start_signal=SIGNAL_REPLICA_LOST,
                start_signal_args=[lost],
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                rpc_timeout=timeout,
            )

        handle = await state.gateway.call(start)
        started = _started_a_run(handle, running_run_id)
        running_run_id = handle.result_run_id
        outcome: Literal["started", "signalled"] = "started" if started else "signalled"
        if started:
            state.metrics.incidents_started.inc()
            log.info("incident started: %s (alert %s)", wid, lost.alertname)
        accepted.append(
            AcceptedAlert(index=item.index, workflow_id=wid, outcome=outcome, dedupe_key=key)
        )
        state.metrics.accepted.labels(outcome=outcome).inc()


async def _deliver_resolved(
    state: IntakeState, item: MappedResolved, accepted: list[AcceptedAlert]
) -> None:
    resolved: AlertResolved = item.resolved
    wid = incident_workflow_id(resolved.namespace, resolved.pool)
    key = dedupe_key(resolved.fingerprint, None)

    async def signal(client: Client) -> bool:
        try:
            await client.get_workflow_handle(wid).signal(
                SIGNAL_ALERT_RESOLVED, resolved, rpc_timeout=state.gateway.rpc_timeout
            )
        except RPCError as exc:
            # Only a running incident takes the signal; a closed or absent one starts nothing.
            if _no_such_workflow(exc):
                return False
            raise
        return True

    delivered = await state.gateway.call(signal)
    outcome: Literal["resolved", "resolved_without_incident"] = (
        "resolved" if delivered else "resolved_without_incident"
    )
    if not delivered:
        log.info("resolved alert for %s with no open incident: recorded only", wid)
    accepted.append(
        AcceptedAlert(index=item.index, workflow_id=wid, outcome=outcome, dedupe_key=key)
    )
    state.metrics.accepted.labels(outcome=outcome).inc()


async def alertmanager(request: Request) -> Response:
    state: IntakeState = request.app.state.intake
    if not _authorised(state, request.headers.get("authorization")):
        return _unauthorised(state)
    raw, problem = await read_json(request)
    if problem is not None:
        state.metrics.rejected.labels(reason="bad_request").inc()
        return problem
    try:
        envelope = WebhookEnvelope.model_validate(raw)
    except ValidationError as exc:
        state.metrics.rejected.labels(reason="bad_envelope").inc()
        return validation_error(exc)

    if envelope.truncatedAlerts:
        state.metrics.truncated.inc(envelope.truncatedAlerts)
        log.warning(
            "group %s: Alertmanager truncated %d alerts (max_alerts); they never reach us",
            envelope.groupKey,
            envelope.truncatedAlerts,
        )

    firing_by_pool: dict[tuple[str, str], list[MappedFiring]] = {}
    resolved: list[MappedResolved] = []
    rejected: list[AlertRejected] = []
    seen: set[str] = set()
    accepted: list[AcceptedAlert] = []
    for index, raw_alert in enumerate(envelope.alerts):
        status = raw_alert.get("status") if isinstance(raw_alert, dict) else None
        state.metrics.received.labels(
            status=status if status in ("firing", "resolved") else "invalid"
        ).inc()
        mapped = (
            map_alert(index, raw_alert, state.mapping, default_dry_run=state.settings.dry_run)
            if index < MAX_ALERTS_PER_REQUEST
            else over_limit(index)
        )
        if isinstance(mapped, AlertRejected):
            rejected.append(mapped)
            state.metrics.rejected.labels(reason=mapped.reason).inc()
        elif isinstance(mapped, MappedResolved):
            resolved.append(mapped)
        else:
            key = mapped.dedupe_key
            wid = incident_workflow_id(mapped.lost.namespace, mapped.lost.pool)
            if key in seen:
                # The same alert twice in one batch: one signal is enough.
                accepted.append(
                    AcceptedAlert(index=index, workflow_id=wid, outcome="duplicate", dedupe_key=key)
                )
                state.metrics.accepted.labels(outcome="duplicate").inc()
                continue
            seen.add(key)
            firing_by_pool.setdefault((mapped.lost.namespace, mapped.lost.pool), []).append(mapped)

    try:
        # Pools are independent incidents; within a pool, order is kept by _deliver_pool.
        await asyncio.gather(
            *(_deliver_pool(state, items, accepted) for items in firing_by_pool.values())
        )
        for item in resolved:
            await _deliver_resolved(state, item, accepted)
    except TemporalUnavailable as exc:
        state.metrics.temporal_unavailable.inc()
        log.warning("temporal unavailable, answering 503 for group %s: %s", envelope.groupKey, exc)
        return JSONResponse(
            ErrorBody(error="temporal unavailable", detail=str(exc)).model_dump(exclude_none=True),
            status_code=503,
            headers={"Retry-After": "5"},
        )
    except RPCError as exc:
        # Temporal refused the request itself (not a transport problem): retrying won't help,
        # so the alerts of this batch that got this far are reported, not retried forever.
        log.error("temporal rejected a start/signal: %s %s", exc.status.name, exc.message)
        state.metrics.rejected.labels(reason="temporal_rejected").inc()
        return JSONResponse(
            ErrorBody(error="temporal rejected the request", detail=exc.message).model_dump(
                exclude_none=True
            ),
            status_code=422,
        )

    accepted.sort(key=lambda a: a.index)
    if rejected and not accepted:
        result_status: Literal["accepted", "partial", "rejected"] = "rejected"
        code = 422
    elif rejected:
        result_status, code = "partial", 200
    else:
        result_status, code = "accepted", 200
    for bad in rejected:
        log.warning("alert %d rejected: %s (%s)", bad.index, bad.field, bad.reason)
    result = IntakeResult(
        status=result_status,
        accepted=accepted,
        rejected=rejected,
        truncated_alerts=envelope.truncatedAlerts,
    )
    return JSONResponse(result.model_dump(mode="json"), status_code=code)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    state: IntakeState = request.app.state.intake
    if await state.gateway.ready():
        return JSONResponse({"status": "ready", "temporal": "reachable"})
    return JSONResponse({"status": "not ready", "temporal": "unreachable"}, status_code=503)


async def metrics(request: Request) -> Response:
    state: IntakeState = request.app.state.intake
    return PlainTextResponse(
        generate_latest(state.metrics.registry).decode(), media_type=CONTENT_TYPE_LATEST
    )


async def openapi(request: Request) -> Response:
    from worker.intake_openapi import openapi_document

    return JSONResponse(openapi_document())


_ROUTES_TIMED = {"/alertmanager", "/actions", "/healthz", "/readyz", "/metrics", "/openapi.json"}


class _TimingMiddleware:
    """Latency per route and code; an unexpected error answers 500 and the process stays up."""

    def __init__(self, app: ASGIApp, *, metrics: IntakeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        code = 500
        response_started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal code, response_started
            if message["type"] == "http.response.start":
                code = message["status"]
                response_started = True
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception:
            log.exception("unexpected error on %s", scope.get("path", "?"))
            if not response_started:
                await JSONResponse({"error": "internal error"}, status_code=500)(
                    scope, receive, send
                )
        finally:
            self.metrics.latency.labels(
                route=_route_label(scope.get("path", "")), code=str(code)
            ).observe(time.perf_counter() - started)


OPEN_PATHS = frozenset({"/healthz"})


class _AuthMiddleware:
    """401 for every request without the credentials, except the liveness probe's."""

    def __init__(self, app: ASGIApp, *, state: IntakeState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") not in OPEN_PATHS:
            header = next(
                (v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"authorization"),
                None,
            )
            if not _authorised(self.state, header):
                await _unauthorised(self.state)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _route_label(path: str) -> str:
    # Bounded label values: an operation id in the path must not become a new series.
    if path in _ROUTES_TIMED:
        return path
    if path.startswith("/actions/"):
        for verb in ("result", "abandon"):
            if path.endswith(f"/{verb}"):
                return f"/actions/{{operation_id}}/{verb}"
    return "other"


def create_app(
    settings: Settings,
    *,
    options: IntakeOptions | None = None,
    mapping: LabelMapping | None = None,
    client: Client | None = None,
    actions: Ledger | None = None,
) -> Starlette:
    """Build the intake. `client` is for tests; production connects lazily from settings.

    `actions` is the ledger behind `POST /actions` (None: those endpoints answer 503).
    """
    if settings.intake_token is None and settings.intake_basic_user is None:
        raise ValueError(
            "the intake needs FLEETMEND_INTAKE_TOKEN (or basic auth) so only Alertmanager posts"
        )
    options = options or IntakeOptions()
    bearer = settings.intake_token.get_secret_value().encode() if settings.intake_token else None
    basic = None
    if settings.intake_basic_user is not None and settings.intake_basic_password is not None:
        basic = (
            settings.intake_basic_user.encode(),
            settings.intake_basic_password.get_secret_value().encode(),
        )
    state = IntakeState(
        settings=settings,
        options=options,
        mapping=mapping or LabelMapping.load(),
        gateway=TemporalGateway(settings, timeout_s=options.temporal_timeout_s, client=client),
        metrics=IntakeMetrics(CollectorRegistry()),
        bearer=bearer,
        basic=basic,
    )

    from worker.intake_actions import (
        action_abandon_endpoint,
        action_result_endpoint,
        actions_endpoint,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        log.info(
            "intake up: temporal %s namespace %s task queue %s",
            settings.temporal_address,
            settings.temporal_namespace,
            settings.task_queue,
        )
        yield

    app = Starlette(
        routes=[
            Route("/alertmanager", alertmanager, methods=["POST"]),
            Route("/actions", actions_endpoint, methods=["POST"]),
            Route("/actions/{operation_id:path}/result", action_result_endpoint, methods=["POST"]),
            Route(
                "/actions/{operation_id:path}/abandon", action_abandon_endpoint, methods=["POST"]
            ),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.intake = state
    app.state.actions = actions

    app.add_middleware(_AuthMiddleware, state=state)
    # Added last, so outermost: a 401 is timed and counted like any other answer.
    app.add_middleware(_TimingMiddleware, metrics=state.metrics)
    return app


def build_app_from_env() -> Starlette:
    """uvicorn factory (`uvicorn --factory worker.intake:build_app_from_env`)."""
    from worker.settings import load_settings

    settings = load_settings()
    ledger = None
    if settings.database_url is not None:
        from ledger.store import Ledger

        ledger = Ledger.connect(settings.database_url, pool_size=4)
    return create_app(settings, actions=ledger)
