"""The Temporal worker process: every fleetmend workflow and activity, on one task queue.

Run by `fleetmend worker` (and by `fleetmend up` / the drill as a child process). Builds
the outside-world clients once (Kubernetes, the ledger, HTTP), hands them to
`activities.build_activities`, and registers ReplicaLossWorkflow and ReconcileWorkflow.

Shutdown: SIGTERM (Kubernetes) or SIGINT sets the stop event; the worker stops polling,
lets running activities finish for `graceful_shutdown_s` (they heartbeat meanwhile, so
Temporal sees them alive), then cancels the rest; Temporal retries those on another
worker, and the ledger guarantees the retry does not apply an effect twice.

A small HTTP server (FLEETMEND_WORKER_HEALTH_PORT) answers `/healthz` (the worker task is
alive), `/readyz` (Temporal answers and the worker is polling) and `/metrics` (process
metrics); the Temporal SDK's own metrics (task latencies, slots, polls) are exported by
the SDK runtime at FLEETMEND_WORKER_METRICS_ADDRESS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST as PROM_CONTENT_TYPE,
    REGISTRY,
    Gauge,
    generate_latest,
)
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from worker.attempts import AttemptReporter
from worker.sandbox import workflow_runner
from worker.settings import Settings

log = logging.getLogger("fleetmend.worker")

WORKER_UP = Gauge("fleetmend_worker_up", "1 while the worker polls its task queue.")
WORKER_SLOTS = Gauge(
    "fleetmend_worker_activity_slots", "Activities the worker runs at once (thread pool size)."
)


class WorkerSetupError(RuntimeError):
    """The worker cannot be built: the message says what is missing, in one line."""


class WorkerOptions(BaseSettings):
    """Worker-only knobs, env FLEETMEND_WORKER_*; the shared ones live in worker.settings."""

    model_config = SettingsConfigDict(env_prefix="FLEETMEND_WORKER_", extra="ignore")

    graceful_shutdown_s: float = Field(
        30.0,
        ge=0,
        description=(
            "After SIGTERM, seconds running activities get to finish before they are "
            "cancelled (keep it below the pod's terminationGracePeriodSeconds)."
        ),
    )
    health_host: str = Field("0.0.0.0", description="Address of /healthz, /readyz, /metrics.")
    health_port: int | None = Field(
        8081, ge=0, le=65535, description="Port of the health server; unset: none."
    )
    metrics_address: str | None = Field(
        None,
        description="host:port where the Temporal SDK exports its Prometheus metrics; unset: off.",
    )


def load_workflows() -> list[type]:
    """The workflow classes, imported here so a missing module is one clear error."""
    try:
        from workflows.reconcile import ReconcileWorkflow
        from workflows.replica_loss import ReplicaLossWorkflow
    except ImportError as exc:
        raise WorkerSetupError(f"workflows are not importable: {exc}") from exc
    return [ReplicaLossWorkflow, ReconcileWorkflow]


def load_activities(settings: Settings) -> tuple[list[Callable[..., Any]], Callable[[], None]]:
    """Every activity bound to its clients, and the function that closes those clients."""
    if settings.database_url is None:
        raise WorkerSetupError("FLEETMEND_DATABASE_URL is not set: every effect needs the ledger")
    import httpx

    try:
        from activities import ActivitySettings, build_activities
        from activities.effects import EffectRunner
        from activities.k8s import build_api_client
        from activities.reconcile import ReconcileActivities
        from ledger.store import Ledger
    except ImportError as exc:
        raise WorkerSetupError(f"activities are not importable: {exc}") from exc
    try:
        if settings.kube_in_cluster:
            api = build_api_client()
        else:
            kubeconfig = settings.kubeconfig or Path("~/.kube/config").expanduser()
            api = build_api_client(str(kubeconfig), context=settings.kube_context)
    except Exception as exc:  # the kubernetes client raises several unrelated types here
        raise WorkerSetupError(f"no Kubernetes configuration: {exc}") from exc
    ledger = Ledger.connect(
        settings.database_url,
        pool_size=settings.max_concurrent_activities,
        lease=settings.ledger_lease_s,
    )
    http = httpx.Client(timeout=10.0)
    activity_settings = ActivitySettings(
        notify_webhook_url=settings.notify_webhook_url,
        router_metrics_url=settings.router_metrics_url,
        default_lead_time_s=settings.provision_lead_time_s,
    )
    activities = build_activities(api, EffectRunner(ledger), http, activity_settings)
    reconcile = ReconcileActivities(ledger, api, activity_settings)
    activities += [
        reconcile.read_ledger_operations,
        reconcile.observe_effects,
        reconcile.store_findings,
    ]

    def close() -> None:
        http.close()
        ledger.close()
        api.close()

    return activities, close


def build_worker(
    client: Client,
    settings: Settings,
    *,
    workflows: Sequence[type] | None = None,
    activities: Sequence[Callable[..., Any]] | None = None,
    executor: ThreadPoolExecutor | None = None,
    graceful_shutdown: timedelta = timedelta(seconds=30),
) -> Worker:
    """The worker on `settings.task_queue`; tests pass their own workflows / activities."""
    slots = settings.max_concurrent_activities
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=list(workflows) if workflows is not None else load_workflows(),
        activities=list(activities or []),
        # Sync activities block a thread each: the pool is exactly as large as the number
        # of activities allowed at once, so none waits for a thread after taking a slot.
        activity_executor=executor or ThreadPoolExecutor(slots, thread_name_prefix="activity"),
        workflow_runner=workflow_runner(),
        max_concurrent_activities=slots,
        graceful_shutdown_timeout=graceful_shutdown,
        # Failed attempts reach the incident's timeline (Temporal alone would hide them).
        interceptors=[AttemptReporter(client)],
    )


async def connect(settings: Settings, *, runtime: Runtime | None = None) -> Client:
    return await Client.connect(
        settings.temporal_address,
        namespace=settings.temporal_namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
    )


def _health_app(client: Client, running: Callable[[], bool]) -> Starlette:
    async def healthz(request: Request) -> Response:
        ok = running()
        return JSONResponse({"status": "ok" if ok else "stopped"}, status_code=200 if ok else 503)

    async def readyz(request: Request) -> Response:
        try:
            await client.service_client.check_health(timeout=timedelta(seconds=3))
        except Exception:  # any failure means "do not count on this worker now"
            return JSONResponse({"status": "not ready", "temporal": "unreachable"}, 503)
        if not running():
            return JSONResponse({"status": "not ready", "worker": "stopped"}, 503)
        return JSONResponse({"status": "ready", "temporal": "reachable"})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(REGISTRY), media_type=PROM_CONTENT_TYPE)

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ]
    )


async def run_worker(
    settings: Settings,
    *,
    stop_event: asyncio.Event | None = None,
    options: WorkerOptions | None = None,
    client: Client | None = None,
    workflows: Sequence[type] | None = None,
    activities: Sequence[Callable[..., Any]] | None = None,
    install_signal_handlers: bool = True,
) -> None:
    """Run until `stop_event` is set (or SIGTERM/SIGINT), then shut down gracefully."""
    options = options or WorkerOptions()
    stop = stop_event or asyncio.Event()
    close_clients: Callable[[], None] = lambda: None  # noqa: E731
    if activities is None:
        activities, close_clients = load_activities(settings)
    if client is None:
        runtime = None
        if options.metrics_address:
            runtime = Runtime(
                telemetry=TelemetryConfig(
                    metrics=PrometheusConfig(bind_address=options.metrics_address)
                )
            )
        client = await connect(settings, runtime=runtime)

    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if install_signal_handlers:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)

    worker = build_worker(
        client,
        settings,
        workflows=workflows,
        activities=activities,
        graceful_shutdown=timedelta(seconds=options.graceful_shutdown_s),
    )
    run_task = asyncio.create_task(worker.run(), name="temporal-worker")
    WORKER_SLOTS.set(settings.max_concurrent_activities)
    health_task: asyncio.Task[None] | None = None
    server = None
    if options.health_port is not None:
        import uvicorn

        server = uvicorn.Server(
            uvicorn.Config(
                _health_app(client, lambda: not run_task.done()),
                host=options.health_host,
                port=options.health_port,
                log_level="warning",
                lifespan="off",
            )
        )
        # The worker owns SIGTERM (graceful drain); uvicorn must not take it over.
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        health_task = asyncio.create_task(server.serve(), name="worker-health")
    WORKER_UP.set(1)
    log.info(
        "worker polling %s on %s (%d activity slots)",
        settings.task_queue,
        settings.temporal_address,
        settings.max_concurrent_activities,
    )
    stop_task = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({run_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        if not run_task.done():
            log.info(
                "stopping: no new tasks; running activities get %.0fs to finish",
                options.graceful_shutdown_s,
            )
            await worker.shutdown()
        await run_task  # re-raises a worker failure (e.g. a workflow that fails validation)
    finally:
        stop_task.cancel()
        WORKER_UP.set(0)
        if server is not None and health_task is not None:
            server.should_exit = True
            await health_task
        for sig in installed:
            loop.remove_signal_handler(sig)
        close_clients()
        log.info("worker stopped")
