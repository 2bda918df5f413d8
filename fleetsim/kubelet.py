"""The simulated kubelet: runs each bound pod's "container" and reports it to the store.

Wired by `Fleet` to the cluster's hooks (`on_pod_scheduled`, `on_pod_terminating`,
`on_pod_deleted`); the fault injector calls its `kill_container`, `evict`, `node_down`
and friends. Per pod it:

* pulls the image (or sits in ErrImagePull / ImagePullBackOff when the pool's registry
  is broken or the node's disk is full), loads weights for the pool's `load_s`, then
  starts a `Replica` on the pod IP (leaders and single-pod replicas; LWS workers and
  filler pods run no HTTP server);
* probes readiness every `probe_period_s` (HTTP `/health`, or a one-token inference)
  and liveness (`/health`), reporting through `Cluster.set_pod_ready`, restarting the
  container after repeated liveness failures;
* restarts a dead container with CrashLoopBackOff-style back-off, cold;
* heartbeats every node it still runs, so a node it stops heartbeating goes Unknown.

Store callbacks may arrive on another thread (the API server's); everything is handed
to the fleet's event loop with `call_soon_threadsafe` before it touches runtime state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx

from fleetsim.actions import ActionSink
from fleetsim.clock import Clock
from fleetsim.contract import (
    ANNOTATION_ENGINE_CORE,
    ANNOTATION_ENGINE_VERSION,
    LABEL_APP,
    LABEL_LWS_WORKER_INDEX,
    LABEL_MODEL_REVISION,
)
from fleetsim.dcgm import NodeGpus, dcgm_app
from fleetsim.engine import Engine, EngineConfig, Health
from fleetsim.kube import events
from fleetsim.kube.cluster import Cluster
from fleetsim.kube.errors import ApiError
from fleetsim.kube.store import Obj
from fleetsim.netserve import Address, AddressHost
from fleetsim.replica import Replica, ReplicaIdentity
from fleetsim.scenario import Pool, Scenario

log = logging.getLogger(__name__)
COMPONENT = "kubelet"

LABEL_ROLE = "fleetsim.io/role"
ROLE_FILLER = "filler"
ROLE_EXPORTER = "dcgm-exporter"

HEARTBEAT_S = 10.0
PROBE_TIMEOUT_S = 1.0
PROBE_MIN_WALL_S = 0.5

LIVENESS_PERIOD_S = 10.0
LIVENESS_FAILURES = 3
BACKOFF_START_S = 10.0
BACKOFF_MAX_S = 300.0
# A bad revision's process gets this far before it exits.
CRASH_AFTER_S = 3.0


async def probe_within(
    request: Coroutine[Any, Any, httpx.Response],
    clock: Clock,
    timeout_s: float = PROBE_TIMEOUT_S,
    min_wall_s: float = PROBE_MIN_WALL_S,
) -> httpx.Response | None:
    """The probe's answer if it came within its timeout, else None; the request never outlives it.

    A probe cancelled mid-flight (its pod stopped) cancels its request too: left running, the
    request later fails on the closed connection with nobody to read the error, and asyncio
    logs it from the garbage collector, at any point of any other code.
    """
    work = asyncio.ensure_future(request)
    started = asyncio.get_running_loop().time()
    timer = asyncio.ensure_future(clock.sleep(timeout_s))
    try:
        await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        # On a fast clock a second of fleet time can be a few milliseconds of wall
        # time; a loaded machine must not fail healthy probes for that.
        spare = min_wall_s - (asyncio.get_running_loop().time() - started)
        if not work.done() and spare > 0:
            await asyncio.wait({work}, timeout=spare)
    finally:
        timer.cancel()
        if not work.done():
            work.cancel()
    if not work.done() or work.cancelled():
        return None
    try:
        return work.result()
    except httpx.HTTPError:
        return None


@dataclass
class PodRuntime:
    namespace: str
    name: str
    uid: str
    node: str
    ip: str
    role: str  # "replica", "worker", "filler", "exporter", "other"
    pool: Pool | None
    labels: dict[str, str]
    annotations: dict[str, str]
    gpus: list[int] = field(default_factory=list)
    replica: Replica | None = None
    address: Address | None = None
    task: asyncio.Task[None] | None = None
    died: asyncio.Event = field(default_factory=asyncio.Event)
    reported_ready: bool | None = None
    terminating: bool = False
    gone: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def engine(self) -> Engine | None:
        return self.replica.engine if self.replica is not None else None


class Kubelet:
    def __init__(
        self,
        cluster: Cluster,
        clock: Clock,
        host: AddressHost,
        scenario: Scenario,
        *,
        port: int,
        node_gpus: dict[str, NodeGpus],
        actions: ActionSink,
    ) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.clock = clock
        self.host = host
        self.scenario = scenario
        self.port = port
        self.node_gpus = node_gpus
        self.actions = actions
        self.pods: dict[tuple[str, str], PodRuntime] = {}
        self.down_nodes: set[str] = set()
        self.disk_full_nodes: set[str] = set()
        self.broken_registry: set[tuple[str, str]] = set()  # (namespace, pool)
        self.bad_revisions: set[str] = set()
        # Pods started while booting are the fleet as it stood before t=0: loaded, warm.
        self.booting = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unhooks: list[Any] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        # One kept-alive connection per replica: httpx's default pool (100 connections, 20
        # kept alive) queues the probes of a large fleet past their timeout, and every
        # replica then reads as not ready. One client per replica address rather than one
        # pool of them all: httpcore scans its whole pool on every request and release, so
        # with 400 replicas the probes took half of the fleet process's CPU (and the GIL
        # from the API server's thread) in the time-to-deroute benchmark.
        self._probe_clients: dict[tuple[str, int], httpx.AsyncClient] = {}
        self._probe_tls = ssl.create_default_context()

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        c = self.cluster
        self._unhooks = [
            c.on_pod_scheduled(lambda pod: self._handoff(self._on_scheduled, pod)),
            c.on_pod_terminating(lambda pod: self._handoff(self._on_terminating, pod)),
            c.on_pod_deleted(lambda pod: self._handoff(self._on_deleted, pod)),
        ]
        # Pods bound before the kubelet started still need running.
        for pod in self.store.list("pods"):
            if (pod.get("spec") or {}).get("nodeName"):
                self._on_scheduled(pod)
        self._heartbeat = asyncio.create_task(self._heartbeats(), name="kubelet heartbeats")

    async def stop(self) -> None:
        for unhook in self._unhooks:
            unhook()
        self._unhooks = []
        tasks = [t for t in (self._heartbeat,) if t is not None]
        tasks += [rt.task for rt in self.pods.values() if rt.task is not None]
        tasks += list(self._background)
        for rt in self.pods.values():
            if rt.engine is not None:
                rt.engine.kill()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        clients, self._probe_clients = self._probe_clients, {}
        for probe_client in clients.values():
            await probe_client.aclose()

    def _handoff(self, fn: Any, pod: Obj) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.call_soon(fn, pod)
        else:
            loop.call_soon_threadsafe(fn, pod)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _heartbeats(self) -> None:
        while True:
            for node in self.node_gpus:
                if node not in self.down_nodes:
                    with contextlib.suppress(ApiError):
                        self.cluster.heartbeat_node(node)
            await self.clock.sleep(HEARTBEAT_S)

    # --- store events ----------------------------------------------------------------

    def _on_scheduled(self, pod: Obj) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        existing = self.pods.get(key)
        if existing is not None and existing.uid == meta["uid"]:
            return
        current = self.store.try_get("pods", meta["name"], namespace=meta["namespace"])
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        node = current["spec"]["nodeName"]
        if node in self.down_nodes:
            return  # nobody is there to run it
        labels = dict(meta.get("labels") or {})
        pool = self._pool_of(meta["namespace"], labels)
        role = labels.get(LABEL_ROLE)
        if role == ROLE_FILLER:
            kind = "filler"
        elif role == ROLE_EXPORTER:
            kind = "exporter"
        elif pool is None:
            kind = "other"
        elif labels.get(LABEL_LWS_WORKER_INDEX, "0") != "0":
            kind = "worker"
        else:
            kind = "replica"
        rt = PodRuntime(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            node=node,
            ip=str((current.get("status") or {}).get("podIP") or ""),
            role=kind,
            pool=pool,
            labels=labels,
            annotations=dict(meta.get("annotations") or {}),
        )
        self.pods[key] = rt
        gpus = self.node_gpus.get(node)
        want = _gpu_request(current)
        if gpus is not None and want:
            rt.gpus = gpus.free_indices()[:want]
            gpus.assign(rt.gpus, rt.key)
        rt.task = asyncio.create_task(self._run(rt), name=f"pod {rt.namespace}/{rt.name}")

    def _on_terminating(self, pod: Obj) -> None:
        rt = self._runtime(pod)
        if rt is None or rt.terminating:
            return
        rt.terminating = True
        if rt.task is not None:
            rt.task.cancel()
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        self._spawn(self._drain(rt, grace), f"drain {rt.name}")

    def _on_deleted(self, pod: Obj) -> None:
        rt = self._runtime(pod)
        if rt is None:
            return
        self._forget(rt)

    def _runtime(self, pod: Obj) -> PodRuntime | None:
        meta = pod["metadata"]
        rt = self.pods.get((meta["namespace"], meta["name"]))
        if rt is None or rt.uid != meta["uid"]:
            return None
        return rt

    def _forget(self, rt: PodRuntime) -> None:
        rt.gone = True
        if rt.task is not None:
            rt.task.cancel()
        self._stop_process(rt, abort=True)
        gpus = self.node_gpus.get(rt.node)
        if gpus is not None:
            gpus.assign(rt.gpus, None)
        if self.pods.get(rt.key) is rt:
            del self.pods[rt.key]

    def _pool_of(self, namespace: str, labels: dict[str, str]) -> Pool | None:
        app = labels.get(LABEL_APP)
        if app is None:
            return None
        try:
            return self.scenario.pool(namespace, app)
        except KeyError:
            return None

    # --- one pod's container -----------------------------------------------------------

    async def _run(self, rt: PodRuntime) -> None:
        try:
            if rt.role == "exporter":
                await self._run_exporter(rt)
                return
            if rt.role in ("filler", "other"):
                self._mark_running(rt, phase="Running")
                self._report_ready(rt, True)
                return
            await self._run_serving(rt)
        except asyncio.CancelledError:
            raise
        except ApiError as err:
            # The pod went away under us: nothing left to report.
            log.debug("pod %s/%s: %s", rt.namespace, rt.name, err)
        except Exception:
            log.exception("kubelet: pod %s/%s failed", rt.namespace, rt.name)

    async def _run_exporter(self, rt: PodRuntime) -> None:
        gpus = self.node_gpus.get(rt.node)
        if gpus is None:
            return
        port = _container_port(self.store.get("pods", rt.name, namespace=rt.namespace))
        rt.address = await self.host.serve(rt.ip, port or self.port, dcgm_app(gpus))
        self._mark_running(rt, phase="Running")
        self._report_ready(rt, True)

    async def _run_serving(self, rt: PodRuntime) -> None:
        assert rt.pool is not None
        rates = self.scenario.pool_rates(rt.pool)
        cold_start = not self.booting
        if not cold_start:
            self._backdate(rt, rates.load_s)
        backoff = BACKOFF_START_S
        await self._pull_image(rt)
        while True:
            rt.died.clear()
            self._mark_running(rt, phase="Running")
            await self.clock.sleep(rates.load_s if cold_start else 0.0)
            if rt.labels.get(LABEL_MODEL_REVISION) in self.bad_revisions:
                await self.clock.sleep(CRASH_AFTER_S)
                self._record(rt, "Warning", "BackOff", "Back-off restarting failed container vllm")
                self.cluster.container_died(rt.namespace, rt.name, reason="Error", exit_code=1)
                self._set_waiting(
                    rt,
                    "CrashLoopBackOff",
                    f"back-off {backoff:.0f}s restarting failed container=vllm",
                )
                await self.clock.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            if rt.role == "replica":
                await self._start_process(rt, warm=not cold_start)
            await self._probe_until_death(rt)
            # The container died (OOM, liveness): restart it cold after a back-off.
            cold_start = True
            await self.clock.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _pull_image(self, rt: PodRuntime) -> None:
        backoff = BACKOFF_START_S
        while True:
            if rt.node in self.disk_full_nodes:
                message = "failed to pull and unpack image: write /var/lib/containerd: no space left on device"
            elif rt.pool is not None and (rt.namespace, rt.pool.name) in self.broken_registry:
                message = "failed to pull image: unexpected status from HEAD request: 503 Service Unavailable"
            else:
                return
            self._set_waiting(rt, "ErrImagePull", message, phase="Pending")
            self._record(rt, "Warning", "Failed", f"Failed to pull image: {message}")
            await self.clock.sleep(1.0)
            self._set_waiting(
                rt, "ImagePullBackOff", f"Back-off pulling image: {message}", phase="Pending"
            )
            await self.clock.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _start_process(self, rt: PodRuntime, *, warm: bool) -> None:
        assert rt.pool is not None
        pool = rt.pool
        rates = self.scenario.pool_rates(pool)
        config = EngineConfig(
            model=pool.model,
            warm_rate=rates.warm_rate,
            cold_frac=rates.cold_frac,
            warmup_s=rates.warmup_s,
            tokens=rates.tokens,
            token_interval_s=rates.token_interval_s,
        )
        engine = Engine(config, self.clock, ready_at=self.clock.now(), warm=warm)
        identity = ReplicaIdentity(
            namespace=rt.namespace,
            pod=rt.name,
            pool=pool.name,
            model=pool.model,
            revision=rt.labels.get(LABEL_MODEL_REVISION, pool.revision),
            engine_version=rt.annotations.get(ANNOTATION_ENGINE_VERSION, pool.engine.version),
            engine_core=rt.annotations.get(ANNOTATION_ENGINE_CORE, pool.engine.core),
            node=rt.node,
        )
        rt.replica = Replica(identity, engine, actions=self.actions)
        rt.address = await self.host.serve(rt.ip, self.port, rt.replica.app)

    def _stop_process(self, rt: PodRuntime, *, abort: bool) -> None:
        if rt.engine is not None:
            rt.engine.kill()
        if rt.address is not None:
            address, rt.address = rt.address, None
            self._spawn(self.host.close(address, abort=abort), f"close {rt.name}")

    async def _probe_until_death(self, rt: PodRuntime) -> None:
        assert rt.pool is not None
        period = self.scenario.probe_period_s
        threshold = self.scenario.probe_failure_threshold
        readiness_failures = liveness_failures = 0
        since_liveness = 0.0
        while not rt.died.is_set():
            ok = await self._probe(rt, inference=rt.pool.readiness == "inference")
            readiness_failures = 0 if ok else readiness_failures + 1
            if ok:
                self._report_ready(rt, True)
            elif readiness_failures >= threshold:
                if rt.reported_ready:
                    self._record(rt, "Warning", "Unhealthy", "Readiness probe failed: timeout")
                self._report_ready(rt, False)
            since_liveness += period
            if since_liveness >= LIVENESS_PERIOD_S and rt.role == "replica":
                since_liveness = 0.0
                live = ok if rt.pool.readiness == "health" else await self._probe(rt)
                liveness_failures = 0 if live else liveness_failures + 1
                if liveness_failures >= LIVENESS_FAILURES:
                    self._record(
                        rt,
                        "Normal",
                        "Killing",
                        "Container vllm failed liveness probe, will be restarted",
                    )
                    self.kill_container(rt, reason="Error", exit_code=137)
                    break
            with contextlib.suppress(TimeoutError):
                await self._wait_or_sleep(rt.died, period)

    async def _wait_or_sleep(self, event: asyncio.Event, seconds: float) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        waiter = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waiter.cancel()

    async def _probe(self, rt: PodRuntime, *, inference: bool = False) -> bool:
        if rt.role != "replica":
            return True  # workers: the process running is all there is to check
        if rt.address is None:
            return False
        ip, port = rt.address
        probe_client = self._probe_clients.get((ip, port))
        if probe_client is None:
            probe_client = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=1.0), verify=self._probe_tls
            )
            self._probe_clients[(ip, port)] = probe_client
        if inference:
            request = probe_client.post(
                f"http://{ip}:{port}/v1/chat/completions",
                json={"max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]},
            )
        else:
            request = probe_client.get(f"http://{ip}:{port}/health")
        response = await probe_within(request, self.clock)
        return response is not None and response.status_code == 200

    async def _drain(self, rt: PodRuntime, grace: float) -> None:
        """Graceful termination: no new connections, in-flight requests may finish."""
        if rt.address is not None:
            address, rt.address = rt.address, None
            await self.host.close(address, abort=False)
        engine = rt.engine
        deadline = self.clock.now() + grace
        while engine is not None and engine.alive and self.clock.now() < deadline:
            if engine.stats.running == 0 and engine.stats.waiting == 0:
                break
            await self.clock.sleep(min(1.0, max(0.0, deadline - self.clock.now())))
        self._stop_process(rt, abort=True)
        if not rt.gone and rt.node not in self.down_nodes:
            with contextlib.suppress(ApiError):
                self.cluster.finish_termination(rt.namespace, rt.name)

    # --- what faults do ------------------------------------------------------------------

    def kill_container(
        self, rt: PodRuntime, *, reason: str = "OOMKilled", exit_code: int = 137
    ) -> None:
        """The container process exits; the lifecycle restarts it cold after a back-off."""
        self._stop_process(rt, abort=True)
        rt.reported_ready = False
        rt.died.set()
        with contextlib.suppress(ApiError):
            self.cluster.container_died(rt.namespace, rt.name, reason=reason, exit_code=exit_code)

    def evict(self, rt: PodRuntime, message: str) -> None:
        """Kubelet eviction: the pod fails for good; its controller must replace it."""
        if rt.task is not None:
            rt.task.cancel()
        self._stop_process(rt, abort=True)
        now = self.store.timestamp()

        def edit(p: Obj) -> None:
            status = p.setdefault("status", {})
            status.update(phase="Failed", reason="Evicted", message=message)
            for cs in status.get("containerStatuses") or []:
                cs["ready"] = False
                cs["started"] = False
                cs["state"] = {
                    "terminated": {"exitCode": 137, "reason": "Evicted", "finishedAt": now}
                }
            for cond in status.get("conditions") or []:
                if cond.get("type") in ("Ready", "ContainersReady"):
                    cond.update(status="False", lastTransitionTime=now)

        with contextlib.suppress(ApiError):
            pod = self.store.mutate("pods", rt.name, edit, namespace=rt.namespace)
            events.record(self.store, pod, "Warning", "Evicted", message, component=COMPONENT)
        gpus = self.node_gpus.get(rt.node)
        if gpus is not None:
            gpus.assign(rt.gpus, None)

    def node_down(self, node: str) -> None:
        """The machine is gone: its processes die and its kubelet falls silent."""
        self.down_nodes.add(node)
        for rt in [rt for rt in self.pods.values() if rt.node == node]:
            if rt.task is not None:
                rt.task.cancel()
            self._stop_process(rt, abort=True)

    def set_health(self, rt: PodRuntime, health: Health) -> None:
        if rt.engine is not None:
            rt.engine.set_health(health)

    def pods_on(self, node: str) -> list[PodRuntime]:
        return [rt for rt in self.pods.values() if rt.node == node]

    # --- status writing ------------------------------------------------------------------

    def _report_ready(self, rt: PodRuntime, ready: bool) -> None:
        if rt.reported_ready == ready or rt.gone or rt.terminating:
            return
        rt.reported_ready = ready
        with contextlib.suppress(ApiError):
            self.cluster.set_pod_ready(rt.namespace, rt.name, ready)

    def _backdate(self, rt: PodRuntime, load_s: float) -> None:
        """A pod of the fleet as it stood before t=0 was created `load_s` earlier, so its
        creation-to-Ready time is a real startup (fleetmend's provisioning lead time)."""
        self.store.backdate("pods", rt.name, load_s, namespace=rt.namespace)

    def _mark_running(self, rt: PodRuntime, *, phase: str) -> None:
        now = self.store.timestamp()

        def edit(p: Obj) -> None:
            status = p.setdefault("status", {})
            status["phase"] = phase
            if not status.get("podIP") and rt.ip:
                status["podIP"] = rt.ip
                status["podIPs"] = [{"ip": rt.ip}]
            statuses = status.setdefault("containerStatuses", [])
            if not statuses:
                for c in p["spec"].get("containers") or []:
                    statuses.append(
                        {
                            "name": c["name"],
                            "image": c.get("image", ""),
                            "imageID": "",
                            "restartCount": 0,
                            "lastState": {},
                        }
                    )
            for cs in statuses:
                if "running" not in (cs.get("state") or {}):
                    cs["state"] = {"running": {"startedAt": now}}
                cs["started"] = True
                cs.setdefault("ready", False)

        with contextlib.suppress(ApiError):
            self.store.mutate("pods", rt.name, edit, namespace=rt.namespace)

    def _set_waiting(
        self, rt: PodRuntime, reason: str, message: str, *, phase: str | None = None
    ) -> None:
        def edit(p: Obj) -> None:
            status = p.setdefault("status", {})
            if phase is not None:
                status["phase"] = phase
            for cs in status.get("containerStatuses") or []:
                cs["state"] = {"waiting": {"reason": reason, "message": message}}
                cs["ready"] = False
                cs["started"] = False

        with contextlib.suppress(ApiError):
            self.store.mutate("pods", rt.name, edit, namespace=rt.namespace)

    def _record(self, rt: PodRuntime, type_: str, reason: str, message: str) -> None:
        pod = self.store.try_get("pods", rt.name, namespace=rt.namespace)
        if pod is not None:
            with contextlib.suppress(ApiError):
                events.record(self.store, pod, type_, reason, message, component=COMPONENT)


def _gpu_request(pod: Obj) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get("nvidia.com/gpu") or (res.get("limits") or {}).get(
            "nvidia.com/gpu"
        )
        total += int(value or 0)
    return total


def _container_port(pod: Obj) -> int | None:
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("containerPort"):
                return int(p["containerPort"])
    return None
