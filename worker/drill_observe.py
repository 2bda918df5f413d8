"""What a drill measures on the simulated fleet while fleetmend works on it.

Called from `worker/drill.py` once per tick. It reads fleetsim in-process (the drill owns
the fleet), never through fleetmend's own code, so the figures are an outside view of
what fleetmend did: when each lost endpoint left the router's ready set, whether the
router sent it anything after that, when the warm floor was back, and per-replica samples
for the report's plots.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fleetsim import contract as c
from fleetsim.fleet import Fleet
from ledger.report import CapacitySample, ReplicaSample


@dataclass
class LostEndpoint:
    """One replica a fault took out, followed from its alert to its removal from routing."""

    namespace: str
    pool: str
    pod: str
    fault_at: float
    alert_at: float | None = None
    out_at: float | None = None
    # The same two moments on the wall clock: fleetmend reacts in real time at any speed.
    alert_wall: float | None = None
    out_wall: float | None = None
    routed_at_out: int | None = None
    routed_after_out: int = 0
    returned: int = 0

    @property
    def time_to_deroute_s(self) -> float | None:
        """Alert received -> endpoint out of the ready set, in wall seconds (0: out already)."""
        if self.alert_wall is None or self.out_wall is None:
            return None
        return round(max(0.0, self.out_wall - self.alert_wall), 3)


@dataclass
class PoolFloor:
    namespace: str
    pool: str
    warm_target: int
    serving_target: int
    restored_at: float | None = None
    lost_at: float | None = None


@dataclass
class Observer:
    fleet: Fleet
    lost: dict[str, LostEndpoint] = field(default_factory=dict)
    floors: dict[tuple[str, str], PoolFloor] = field(default_factory=dict)
    replicas: list[ReplicaSample] = field(default_factory=list)
    capacity: list[CapacitySample] = field(default_factory=list)
    _sample_every_s: float = 2.0
    _last_sample: float = -1e9

    def __post_init__(self) -> None:
        for ns in self.fleet.scenario.namespaces:
            for pool in ns.pools:
                self.floors[(ns.name, pool.name)] = PoolFloor(
                    ns.name, pool.name, pool.warm_spares, pool.replicas
                )

    # --- lost endpoints ----------------------------------------------------------------

    def track(self, namespace: str, pool: str, pod: str, fault_at: float) -> None:
        key = f"{namespace}/{pod}"
        if key not in self.lost:
            self.lost[key] = LostEndpoint(namespace, pool, pod, fault_at)
        floor = self.floors.get((namespace, pool))
        if floor is not None and floor.lost_at is None:
            floor.lost_at = fault_at

    def alert_received(self, namespace: str, pod: str, at: float) -> None:
        lost = self.lost.get(f"{namespace}/{pod}")
        if lost is not None and lost.alert_at is None:
            lost.alert_at = at
            lost.alert_wall = time.monotonic()

    def routable(self, namespace: str, pool: str) -> set[str]:
        """Pods the router would send a request to right now: its own ready set."""
        table = self.fleet.router.table(namespace, pool)
        return {e.pod for e in table.endpoints}

    def _routed(self, pod: str) -> int:
        counters = self.fleet.counters
        return int(counters.routed_by_pod.get(pod, 0))

    # --- warm floor --------------------------------------------------------------------

    def _ready_pods(self, namespace: str, pool: str, role: str) -> int:
        pods = self.fleet.store.list(
            "pods",
            namespace=namespace,
            label_selector=f"{c.LABEL_APP}={pool},{c.LABEL_POOL}={role}",
        )
        ready = 0
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if role == c.POOL_WARM and pod["metadata"]["labels"].get(c.LABEL_SERVING):
                # A promoted spare serves: it no longer counts towards the warm floor.
                continue
            if pod["metadata"]["labels"].get(c.LABEL_LWS_WORKER_INDEX, "0") != "0":
                continue  # a LeaderWorkerSet group counts once, by its leader
            for cond in (pod.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Ready" and cond.get("status") == "True":
                    ready += 1
        return ready

    def warm_floor_restored(self, namespace: str, pool: str) -> bool:
        floor = self.floors[(namespace, pool)]
        serving = len(self.routable(namespace, pool))
        warm = self._ready_pods(namespace, pool, c.POOL_WARM)
        return serving >= floor.serving_target and warm >= floor.warm_target

    # --- one tick ----------------------------------------------------------------------

    def tick(self) -> None:
        now = self.fleet.now()
        for lost in self.lost.values():
            in_set = lost.pod in self.routable(lost.namespace, lost.pool)
            if lost.out_at is None and not in_set:
                lost.out_at = now
                lost.out_wall = time.monotonic()
                lost.routed_at_out = self._routed(lost.pod)
            elif lost.out_at is not None and in_set:
                # Back in the ready set (a restarted container passed its probe): it left
                # only when it leaves for good, so the clock and the count start again.
                lost.out_at = None
                lost.out_wall = None
                lost.routed_at_out = None
                lost.returned += 1
            elif lost.out_at is not None and lost.routed_at_out is not None:
                lost.routed_after_out = self._routed(lost.pod) - lost.routed_at_out
        for (namespace, pool), floor in self.floors.items():
            if floor.lost_at is None:
                continue
            restored = all(
                lost.out_at is not None
                for lost in self.lost.values()
                if (lost.namespace, lost.pool) == (namespace, pool)
            ) and self.warm_floor_restored(namespace, pool)
            if restored and floor.restored_at is None:
                floor.restored_at = now
            elif not restored:
                # Back for good only: a spare promoted afterwards spends the floor again.
                floor.restored_at = None
        if now - self._last_sample >= self._sample_every_s:
            self._last_sample = now
            self._sample(now)

    def _sample(self, now: float) -> None:
        counters = self.fleet.counters
        for ns in self.fleet.scenario.namespaces:
            for pool in ns.pools:
                table = self.fleet.router.table(ns.name, pool.name)
                capacity = 0.0
                for endpoint in table.endpoints:
                    runtime = self.fleet.kubelet.pods.get((ns.name, endpoint.pod))
                    engine = runtime.engine if runtime is not None else None
                    capacity += engine.service_rate() if engine is not None else 0.0
                    self.replicas.append(
                        ReplicaSample(
                            t=round(now, 2),
                            replica=endpoint.pod,
                            queue_depth=float(engine.stats.waiting) if engine is not None else 0.0,
                            ttft_p99_s=counters.max_wait_by_pod.get(endpoint.pod),
                            router_weight=endpoint.weight,
                        )
                    )
                demand = sum(t.rate for t in self.fleet.scenario.traffic if t.pool == pool.name)
                self.capacity.append(
                    CapacitySample(t=round(now, 2), ready_capacity=capacity, demand=demand or None)
                )

    # --- results -----------------------------------------------------------------------

    def time_to_deroute(self) -> dict[str, float | None]:
        return {key: lost.time_to_deroute_s for key, lost in sorted(self.lost.items())}

    def routed_after_deroute(self) -> dict[str, int]:
        return {key: lost.routed_after_out for key, lost in sorted(self.lost.items())}

    def time_to_warm_floor(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for (namespace, pool), floor in sorted(self.floors.items()):
            if floor.lost_at is None:
                continue
            first_alert = min(
                (
                    lost.alert_at
                    for lost in self.lost.values()
                    if (lost.namespace, lost.pool) == (namespace, pool)
                    and lost.alert_at is not None
                ),
                default=None,
            )
            if floor.restored_at is None or first_alert is None:
                out[f"{namespace}/{pool}"] = None
            else:
                out[f"{namespace}/{pool}"] = round(max(0.0, floor.restored_at - first_alert), 3)
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "time_to_deroute_s": self.time_to_deroute(),
            "routed_after_deroute": self.routed_after_deroute(),
            "time_to_warm_floor_s": self.time_to_warm_floor(),
        }
