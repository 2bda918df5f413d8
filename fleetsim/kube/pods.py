"""Pod facts and pod status edits shared by the controllers and the fleet builder.

Called from the scheduler (GPU requests, binding), the EndpointSlice controller
(readiness), the node and LeaderWorkerSet controllers (recomputing Ready) and
`Cluster.set_pod_ready` (the replica engineer's kubelet reporting probe results).

Readiness is computed the way the kubelet does it: a pod is Ready when its
containers are ready (the `ContainersReady` condition, which the kubelet sets from
probes), every `spec.readinessGates` condition is True, and its node is Ready
(the node lifecycle controller marks pods on a NotReady node not ready).
"""

from __future__ import annotations

import ipaddress
import threading
from typing import Any

from fleetsim.kube.store import Obj, Store

GPU = "nvidia.com/gpu"
TERMINAL_PHASES = ("Succeeded", "Failed")


def condition(obj: Obj, type_: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def condition_true(obj: Obj, type_: str) -> bool:
    cond = condition(obj, type_)
    return cond is not None and cond.get("status") == "True"


def set_condition(
    obj: Obj,
    type_: str,
    status: str,
    now: str,
    *,
    reason: str | None = None,
    message: str | None = None,
    heartbeat: bool = False,
) -> None:
    """Set a status condition in place; lastTransitionTime moves only when status does."""
    conds: list[dict[str, Any]] = obj.setdefault("status", {}).setdefault("conditions", [])
    current = next((c for c in conds if c.get("type") == type_), None)
    if current is None:
        current = {"type": type_}
        conds.append(current)
    if current.get("status") != status:
        current["lastTransitionTime"] = now
    current["status"] = status
    if heartbeat:
        current["lastHeartbeatTime"] = now
    if "lastProbeTime" not in current and not heartbeat:
        current["lastProbeTime"] = None
    for field, value in (("reason", reason), ("message", message)):
        if value is None:
            current.pop(field, None)
        else:
            current[field] = value


def is_ready(pod: Obj) -> bool:
    return condition_true(pod, "Ready")


def is_terminating(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def node_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def parse_quantity(value: Any) -> int:
    """Whole-unit quantities only: GPUs are counted, never fractional."""
    if value is None:
        return 0
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        return int(float(text))


def gpu_request(pod: Obj) -> int:
    """GPUs a pod holds: requests, or limits where no request is given (as Kubernetes
    defaults an extended resource's request to its limit)."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        total += parse_quantity(requests.get(GPU, limits.get(GPU)))
    return total


def node_gpus(node: Obj) -> int:
    status = node.get("status") or {}
    return parse_quantity((status.get("allocatable") or status.get("capacity") or {}).get(GPU))


def node_ready(node: Obj | None) -> bool:
    return node is not None and condition_true(node, "Ready")


def refresh_ready(pod: Obj, node: Obj | None, now: str) -> None:
    """Recompute the pod's Ready condition in place from its parts."""
    if not node_name(pod):
        return
    gates = [g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []]
    failed_gates = [g for g in gates if g and not condition_true(pod, g)]
    containers = condition_true(pod, "ContainersReady")
    if is_terminal(pod):
        set_condition(pod, "Ready", "False", now, reason="PodCompleted")
    elif not node_ready(node):
        set_condition(pod, "Ready", "False", now, reason="NodeNotReady")
    elif not containers:
        set_condition(
            pod,
            "Ready",
            "False",
            now,
            reason="ContainersNotReady",
            message="containers with unready status",
        )
    elif failed_gates:
        set_condition(
            pod,
            "Ready",
            "False",
            now,
            reason="ReadinessGatesNotReady",
            message=f"corresponding condition of pod readiness gate {failed_gates[0]!r} "
            "does not exist or is not True",
        )
    else:
        set_condition(pod, "Ready", "True", now)


def set_containers_ready(pod: Obj, ready: bool, now: str) -> None:
    set_condition(
        pod,
        "ContainersReady",
        "True" if ready else "False",
        now,
        reason=None if ready else "ContainersNotReady",
    )
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        status["ready"] = ready


def update_readiness(
    store: Store,
    namespace: str,
    name: str,
    *,
    containers_ready: bool | None = None,
    gate: tuple[str, bool] | None = None,
) -> Obj:
    """Change containers readiness and/or one readiness gate, then recompute Ready."""
    pod = store.get("pods", name, namespace=namespace, copy=False)
    node = store.try_get("nodes", node_name(pod), copy=False) if node_name(pod) else None
    now = store.timestamp()

    def edit(p: Obj) -> None:
        if containers_ready is not None:
            set_containers_ready(p, containers_ready, now)
        if gate is not None:
            set_condition(p, gate[0], "True" if gate[1] else "False", now)
        refresh_ready(p, node, now)

    return store.mutate("pods", name, edit, namespace=namespace)


class IpAllocator:
    """Unique loopback addresses for pods: 127.10.0.1 upwards, reused after release.

    Each simulated replica binds its own 127.x.y.z, so addresses must never collide
    while a pod holds one; .0 and .255 are skipped so no address looks like a network
    or broadcast address in a /24 view.
    """

    def __init__(self, first: str = "127.10.0.1") -> None:
        self._next = int(ipaddress.IPv4Address(first))
        self._last = int(ipaddress.IPv4Address("127.255.255.254"))
        self._free: list[int] = []
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def allocate(self) -> str:
        with self._lock:
            if self._free:
                value = self._free.pop(0)
            else:
                while self._next % 256 in (0, 255):
                    self._next += 1
                if self._next > self._last:
                    raise RuntimeError("loopback pod address range exhausted")
                value = self._next
                self._next += 1
            address = str(ipaddress.IPv4Address(value))
            self._held.add(address)
            return address

    def reserve(self, address: str) -> None:
        """Mark an address the fleet builder chose itself as taken."""
        with self._lock:
            self._held.add(address)
            value = int(ipaddress.IPv4Address(address))
            if value in self._free:
                self._free.remove(value)

    def release(self, address: str) -> None:
        with self._lock:
            if address in self._held:
                self._held.discard(address)
                value = int(ipaddress.IPv4Address(address))
                if value < self._next:
                    self._free.append(value)
                    self._free.sort()
