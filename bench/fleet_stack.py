"""The real stack beside a generated many-pool fleet, for the end-to-end benchmarks.

Used by `deroute_bench`, `storm_bench` and `concurrent_bench` (and their smoke tests).
`many_pools_scenario` writes a fleetsim scenario with named groups of pools, each group in
namespaces of its own, so one fleet can serve several measurements without one's
incidents touching another's pools. `BenchStack` runs it through the drill's own set-up
(`worker.drill.Drill.start`): fleetsim in this process serving the Kubernetes API, and the
embedded PostgreSQL, the Temporal dev server, the worker and the intake as child
processes. `ReadySetWatch` timestamps the moment a pod leaves the router's ready set,
from the fleet's store events, so no polling interval hides in the figures.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from temporalio.client import Client

from fleetsim.faults import InjectedFault
from fleetsim.fleet import Fleet
from fleetsim.kube.store import Event
from worker.drill import Drill, DrillOptions, webhook_payload
from worker.settings import load_settings

# Two replicas a pool keeps the fleet small enough for 2 cores (fleetsim runs every replica
# in this process); losing one of two is 50% of the pool, so the automatic blast-radius
# limit is raised to that and no deroute waits for an operator.
REPLICAS_PER_POOL = 2
BLAST_RADIUS_FRACTION = 0.5
POOLS_PER_NAMESPACE = 25
GPUS_PER_NODE = 8
# The lost replicas keep answering /health (Xid 79), so readiness probes never take them
# out: the router drops them only when fleetmend removes the label. A slow probe cadence
# keeps the simulator's own work out of the measurement.
PROBE_PERIOD_S = 30.0
FLEET_READY_TIMEOUT_S = 180.0
DEROUTE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class PoolRef:
    namespace: str
    pool: str

    @property
    def workflow_id(self) -> str:
        return f"replica-loss/{self.namespace}/{self.pool}"


def group_pools(group: str, count: int) -> list[PoolRef]:
    """The pools of one named group: `{group}-{n // 25}` namespaces, pools `p{n:03d}`."""
    return [PoolRef(f"{group}-{n // POOLS_PER_NAMESPACE}", f"p{n:03d}") for n in range(count)]


def many_pools_scenario(name: str, groups: dict[str, int]) -> dict[str, Any]:
    """A fleetsim scenario with `groups[g]` two-replica pools per group, no traffic, no faults.

    Traffic is left out on purpose: the benchmarks time fleetmend's reaction, and the
    router's generators would take CPU from it on a 2-core machine. Without traffic the
    measured rates are zero and the blast radius falls back to replica counts.
    """
    namespaces: dict[str, list[dict[str, Any]]] = {}
    for group, count in groups.items():
        if count < 0:
            raise ValueError(f"group {group!r}: count must be >= 0, got {count}")
        for ref in group_pools(group, count):
            namespaces.setdefault(ref.namespace, []).append(
                {
                    "name": ref.pool,
                    "model": "bench/llm",
                    "replicas": REPLICAS_PER_POOL,
                    "gpus_per_replica": 1,
                }
            )
    if not namespaces:
        raise ValueError("a bench scenario needs at least one pool")
    gpus = REPLICAS_PER_POOL * sum(groups.values())
    return {
        "name": name,
        "description": f"benchmark fleet: {groups}",
        "duration_s": 3600,
        "probe_period_s": PROBE_PERIOD_S,
        "nodes": [{"name": "gpu", "count": max(2, math.ceil(gpus / GPUS_PER_NODE))}],
        "namespaces": [{"name": ns, "pools": pools} for ns, pools in namespaces.items()],
    }


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by the nearest-rank method; the list must not be empty."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def proc_memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak since the process started) from /proc, in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # utime and stime are fields 14 and 15 of stat(5); the split starts at field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


def format_cpu(cpu: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in cpu.items())


class ReadySetWatch:
    """When each watched pod left its pool's ready set, on `time.perf_counter()`.

    Store events arrive on whichever thread changed the store (the API server's); the
    router invalidates its table on the same events before this runs, so the check sees
    the ready set as the router would route the next request.
    """

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], tuple[str, asyncio.Future[float]]] = {}
        self._loop = asyncio.get_running_loop()
        self._unsubscribe = [
            fleet.store.subscribe(self._on_event, resource=r) for r in ("pods", "endpointslices")
        ]

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()

    def in_ready_set(self, ref: PoolRef, pod: str) -> bool:
        table = self.fleet.router.table(ref.namespace, ref.pool)
        return any(e.pod == pod for e in table.endpoints)

    def watch(self, ref: PoolRef, pod: str) -> asyncio.Future[float]:
        """A future resolved with the moment `pod` is out (now, if it is out already)."""
        future: asyncio.Future[float] = self._loop.create_future()
        with self._lock:
            self._pending[(ref.namespace, pod)] = (ref.pool, future)
        self._check(ref.namespace)
        return future

    def _on_event(self, event: Event) -> None:
        namespace = (event.object.get("metadata") or {}).get("namespace", "")
        self._check(namespace)

    def _check(self, namespace: str) -> None:
        with self._lock:
            waiting = [(k, v) for k, v in self._pending.items() if k[0] == namespace]
        if not waiting:
            return
        now = time.perf_counter()
        for (ns, pod), (pool, future) in waiting:
            if self.in_ready_set(PoolRef(ns, pool), pod):
                continue
            with self._lock:
                self._pending.pop((ns, pod), None)
            self._loop.call_soon_threadsafe(_resolve, future, now)


def _resolve(future: asyncio.Future[float], value: float) -> None:
    if not future.done():
        future.set_result(value)


@dataclass
class PostResult:
    status: int
    seconds: float
    body: dict[str, Any]
    attempts: int


@dataclass
class BenchStack:
    """A running fleet and stack; `async with BenchStack.open(...)` tears both down."""

    drill: Drill
    watch: ReadySetWatch
    http: httpx.AsyncClient
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def fleet(self) -> Fleet:
        return self.drill.fleet

    @property
    def client(self) -> Client:
        assert self.drill.client is not None
        return self.drill.client

    @property
    def worker_pid(self) -> int:
        assert self.drill.stack is not None
        return next(c.process.pid for c in self.drill.stack.children if c.name == "worker")

    def process_pids(self) -> dict[str, int]:
        """This process (fleetsim and the benchmark itself) and the stack's children."""
        assert self.drill.stack is not None
        pids = {"fleetsim + bench": os.getpid()}
        pids |= {c.name: c.process.pid for c in self.drill.stack.children}
        return pids

    def cpu_seconds(self) -> dict[str, float]:
        return {name: proc_cpu_seconds(pid) for name, pid in self.process_pids().items()}

    @property
    def database_url(self) -> str:
        assert self.drill.stack is not None
        return self.drill.stack.database_url

    @property
    def kubeconfig(self) -> Path:
        return self.drill.run_dir / "kubeconfig"

    def inject_xid(self, ref: PoolRef, replica: int = 0) -> InjectedFault:
        """Xid 79 under one serving replica: /health still answers, inference hangs."""
        return self.fleet.inject(
            {
                "at": 0,
                "kind": "gpu-xid",
                "xid": 79,
                "target": {"namespace": ref.namespace, "pool": ref.pool, "replica": replica},
            }
        )

    def payload_for(self, fault: InjectedFault) -> dict[str, Any]:
        return webhook_payload([a.to_alertmanager() for a in fault.alerts])

    async def post(self, payload: dict[str, Any], *, retries: int = 5) -> PostResult:
        """POST as Alertmanager does: a 5xx or a transport error is retried with back-off.

        `seconds` is the last attempt's latency; a retried alert is still one alert.
        """
        assert self.drill.stack is not None
        url = f"{self.drill.stack.intake_url}/alertmanager"
        headers = {"Authorization": f"Bearer {self.drill.token}"}
        status, body, seconds = 0, {}, 0.0
        for attempt in range(1, retries + 2):
            started = time.perf_counter()
            try:
                resp = await self.http.post(url, json=payload, headers=headers)
            except httpx.HTTPError as exc:
                status, body = 0, {"error": type(exc).__name__}
            else:
                status, body = resp.status_code, resp.json()
            seconds = time.perf_counter() - started
            if 200 <= status < 500:
                return PostResult(status, seconds, body, attempt)
            await asyncio.sleep(min(0.25 * 2 ** (attempt - 1), 4.0))
        return PostResult(status, seconds, body, retries + 1)

    async def time_to_deroute(self, ref: PoolRef, *, terminate: bool = True) -> dict[str, Any]:
        """Xid under replica 0, its alert posted, until the endpoint is out (`seconds`).

        `seconds` is None when it was still routed after DEROUTE_TIMEOUT_S. With
        `terminate` the incident ends right after, so its later steps load nothing.
        """
        fault = self.inject_xid(ref)
        pod = fault.pods[0].partition("/")[2]
        out = self.watch.watch(ref, pod)
        payload = self.payload_for(fault)
        posted_wall, posted = time.time(), time.perf_counter()
        result = await self.post(payload)
        row: dict[str, Any] = {"pool": ref.workflow_id, "seconds": None, "status": result.status}
        try:
            out_at = await asyncio.wait_for(out, DEROUTE_TIMEOUT_S)
        except TimeoutError:
            return row
        finally:
            if terminate:
                await self.terminate(ref, "benchmark: time to deroute measured")
        seconds = out_at - posted
        return row | {
            "seconds": seconds,
            "posted_wall": posted_wall,
            "out_wall": posted_wall + seconds,
        }

    async def terminate(self, ref: PoolRef, reason: str) -> None:
        """End an incident without its later steps: the benchmark measured what it needed."""
        try:
            await self.client.get_workflow_handle(ref.workflow_id).terminate(reason=reason)
        except Exception:  # already closed: nothing to stop
            return

    @classmethod
    def open(cls, name: str, groups: dict[str, int], workdir: Path, **settings: Any) -> _Opener:
        """`settings` override the stack's (e.g. max_concurrent_activities=64)."""
        return _Opener(name, groups, workdir, settings)


class _Opener:
    def __init__(
        self, name: str, groups: dict[str, int], workdir: Path, settings: dict[str, Any]
    ) -> None:
        self.name = name
        self.groups = groups
        self.workdir = workdir
        self.settings = settings
        self.bench: BenchStack | None = None

    async def __aenter__(self) -> BenchStack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / f"{self.name}.yaml"
        path.write_text(yaml.safe_dump(many_pools_scenario(self.name, self.groups)))
        settings = load_settings(
            state_dir=self.workdir / "state",
            blast_radius_fraction=BLAST_RADIUS_FRACTION,
            **self.settings,
        )
        drill = Drill(settings, DrillOptions(scenario=str(path), free_ports=True))
        timings: dict[str, float] = {}
        try:
            started = time.perf_counter()
            await drill.fleet.start(ready_timeout_s=FLEET_READY_TIMEOUT_S)
            timings["fleet_start_s"] = time.perf_counter() - started
            started = time.perf_counter()
            await drill.start()
            timings["stack_start_s"] = time.perf_counter() - started
        except BaseException:
            await drill.close()
            raise
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        http = httpx.AsyncClient(timeout=30.0, limits=limits)
        self.bench = BenchStack(drill, ReadySetWatch(drill.fleet), http, timings)
        return self.bench

    async def __aexit__(self, *exc: object) -> None:
        if self.bench is not None:
            self.bench.watch.close()
            await self.bench.http.aclose()
            await self.bench.drill.close()


def load_average() -> float:
    return round(os.getloadavg()[0], 1)
