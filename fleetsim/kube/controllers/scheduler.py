"""The scheduler: binds pending pods to nodes with enough free `nvidia.com/gpu`.

Called from the store's event stream whenever capacity or demand may have changed
(a pod created or gone, a node added, cordoned, tainted or changing readiness).
Free GPUs on a node are its allocatable GPUs minus what the non-terminal pods bound
to it request (terminating pods still hold theirs): Allocatable is not free
capacity. A node is admissible when it is schedulable, matches the pod's
nodeSelector, has no untolerated NoSchedule/NoExecute taint and has the GPUs free.
Among admissible nodes the least allocated wins (the default scheduler's
LeastAllocated spreading, which is what fragments a GPU fleet).

With no admissible node the pod stays Pending with PodScheduled=False and a
`FailedScheduling` Warning event whose message has the real scheduler's shape:
`0/4 nodes are available: 1 node(s) were unschedulable, 3 Insufficient nvidia.com/gpu.`
A bound pod gets nodeName, hostIP, a loopback podIP (unless the fleet builder gave
it one), phase Running and a `Scheduled` event; `Cluster.on_pod_scheduled` fires.
"""

from __future__ import annotations

import collections
from typing import Any

from fleetsim.kube import events, pods
from fleetsim.kube.controllers.base import Context
from fleetsim.kube.errors import ApiError
from fleetsim.kube.store import Event, Obj

COMPONENT = "default-scheduler"


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol.get("key") == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def free_gpus(node: Obj, bound: list[Obj]) -> int:
    """Allocatable GPUs minus those requested by the non-terminal pods bound to it."""
    return pods.node_gpus(node) - sum(pods.gpu_request(p) for p in bound if not pods.is_terminal(p))


def gpu_summary(store: Any) -> dict[str, dict[str, int]]:
    """Per node: allocatable, requested and free GPUs (the scheduler's own view)."""
    by_node: dict[str, list[Obj]] = collections.defaultdict(list)
    for pod in store.list("pods", copy=False):
        if pods.node_name(pod):
            by_node[pods.node_name(pod)].append(pod)
    out = {}
    for node in store.list("nodes", copy=False):
        name = node["metadata"]["name"]
        free = free_gpus(node, by_node[name])
        out[name] = {
            "allocatable": pods.node_gpus(node),
            "free": free,
            "requested": pods.node_gpus(node) - free,
        }
    return out


class Scheduler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._busy = False
        self._again = False
        ctx.store.subscribe(self._on_pod, resource="pods")
        ctx.store.subscribe(self._on_node, resource="nodes")

    # --------------------------------------------------------------- triggers
    def _on_pod(self, event: Event) -> None:
        pod, old = event.object, event.old
        if event.type == "ADDED":
            relevant = not pods.node_name(pod)
        elif event.type == "DELETED":
            relevant = bool(pods.node_name(pod))
        else:
            assert old is not None
            relevant = pods.is_terminal(pod) != pods.is_terminal(old) or (
                pods.node_name(pod) != pods.node_name(old)
            )
        if relevant:
            self.schedule_pending()

    def _on_node(self, event: Event) -> None:
        if event.type == "DELETED":
            return
        old = event.old or {}
        node = event.object
        if (
            event.type == "ADDED"
            or node.get("spec") != old.get("spec")
            or node["metadata"].get("labels") != old["metadata"].get("labels")
            or pods.node_gpus(node) != pods.node_gpus(old)
            or pods.node_ready(node) != pods.node_ready(old)
        ):
            self.schedule_pending()

    # --------------------------------------------------------------- the work
    def schedule_pending(self) -> None:
        """Try every pending pod, oldest first."""
        # Binding emits events that trigger us again; one pass at a time is enough.
        if self._busy:
            self._again = True
            return
        self._busy = True
        try:
            while True:
                self._again = False
                self._pass()
                if not self._again:
                    break
        finally:
            self._busy = False

    def _pass(self) -> None:
        store = self.ctx.store
        pending = [
            p
            for p in store.list("pods", copy=False)
            if not pods.node_name(p)
            and not pods.is_terminating(p)
            and not pods.is_terminal(p)
            and (p.get("spec") or {}).get("schedulerName", COMPONENT) == COMPONENT
        ]
        if not pending:
            return
        nodes = store.list("nodes", copy=False)
        bound: dict[str, list[Obj]] = collections.defaultdict(list)
        for p in store.list("pods", copy=False):
            if pods.node_name(p):
                bound[pods.node_name(p)].append(p)
        free = {n["metadata"]["name"]: free_gpus(n, bound[n["metadata"]["name"]]) for n in nodes}
        for pod in pending:
            chosen, reasons = self._choose(pod, nodes, free)
            try:
                if chosen is None:
                    self._unschedulable(pod, len(nodes), reasons)
                else:
                    self._bind(pod, chosen)
                    free[chosen["metadata"]["name"]] -= pods.gpu_request(pod)
            except ApiError:
                continue  # the pod went away or changed under us; the next event retries

    def _choose(
        self, pod: Obj, nodes: list[Obj], free: dict[str, int]
    ) -> tuple[Obj | None, collections.Counter[str]]:
        spec = pod.get("spec") or {}
        selector = spec.get("nodeSelector") or {}
        tolerations = spec.get("tolerations") or []
        want = pods.gpu_request(pod)
        reasons: collections.Counter[str] = collections.Counter()
        fits: list[Obj] = []
        # One reason per node, from the first filter that rejects it, in kube-scheduler's
        # plugin order: NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit.
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            blocking = [
                t
                for t in (node.get("spec") or {}).get("taints") or []
                if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)
            ]
            if (node.get("spec") or {}).get("unschedulable"):
                reasons["node(s) were unschedulable"] += 1
            elif blocking:
                t = blocking[0]
                reasons[
                    f"node(s) had untolerated taint {{{t.get('key')}: {t.get('value', '')}}}"
                ] += 1
            elif any(labels.get(k) != v for k, v in selector.items()):
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
            elif free[node["metadata"]["name"]] < want:
                reasons[f"Insufficient {pods.GPU}"] += 1
            else:
                fits.append(node)
        if not fits:
            return None, reasons

        def spread(node: Obj) -> tuple[float, str]:
            total = pods.node_gpus(node) or 1
            return (-(free[node["metadata"]["name"]] - want) / total, node["metadata"]["name"])

        return min(fits, key=spread), reasons

    def _unschedulable(self, pod: Obj, total: int, reasons: collections.Counter[str]) -> None:
        detail = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
        message = (
            f"0/{total} nodes are available: {detail}. preemption: 0/{total} nodes are "
            f"available: {total} Preemption is not helpful for scheduling."
            if total
            else "no nodes available to schedule pods"
        )
        store = self.ctx.store
        now = store.timestamp()

        def mark(p: Obj) -> None:
            p.setdefault("status", {})["phase"] = "Pending"
            pods.set_condition(
                p, "PodScheduled", "False", now, reason="Unschedulable", message=message
            )

        meta = pod["metadata"]
        current = pods.condition(pod, "PodScheduled") or {}
        updated = store.mutate("pods", meta["name"], mark, namespace=meta.get("namespace"))
        if current.get("message") != message:
            events.record(
                store, updated, "Warning", "FailedScheduling", message, component=COMPONENT
            )

    def _bind(self, pod: Obj, node: Obj) -> None:
        store = self.ctx.store
        meta = pod["metadata"]
        node_name = node["metadata"]["name"]
        host_ip = next(
            (
                a.get("address")
                for a in (node.get("status") or {}).get("addresses") or []
                if a.get("type") == "InternalIP"
            ),
            "127.0.0.1",
        )
        given_ip = (pod.get("status") or {}).get("podIP")
        pod_ip = given_ip or self.ctx.ips.allocate()
        now = store.timestamp()
        ready = self.ctx.ready_on_schedule

        def bind(p: Obj) -> None:
            p["spec"]["nodeName"] = node_name
            status = p.setdefault("status", {})
            status.update(phase="Running", hostIP=host_ip, podIP=pod_ip, startTime=now)
            status["hostIPs"] = [{"ip": host_ip}]
            status["podIPs"] = [{"ip": pod_ip}]
            status["qosClass"] = status.get("qosClass", "BestEffort")
            pods.set_condition(p, "PodScheduled", "True", now)
            pods.set_condition(p, "Initialized", "True", now)
            status["containerStatuses"] = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": ready,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                    "lastState": {},
                }
                for c in p["spec"].get("containers") or []
            ]
            pods.set_containers_ready(p, ready, now)
            pods.refresh_ready(p, node, now)

        try:
            bound = store.mutate("pods", meta["name"], bind, namespace=meta.get("namespace"))
        except ApiError:
            if not given_ip:
                self.ctx.ips.release(pod_ip)
            raise
        events.record(
            store,
            bound,
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node_name}",
            component=COMPONENT,
        )
