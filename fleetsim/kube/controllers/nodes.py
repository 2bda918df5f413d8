"""Node lifecycle: a node that stops being Ready takes its pods out of readiness.

Called from the store's event stream (node condition changes) and from
`Cluster.heartbeat_node` (the simulated kubelet's status updates). As in the real
node lifecycle controller:

- when a node's Ready condition leaves True, every pod on it gets Ready=False
  (so its EndpointSlice endpoint turns ready=false) and the node is tainted
  `node.kubernetes.io/not-ready` (False) or `node.kubernetes.io/unreachable`
  (Unknown) with effect NoSchedule, which keeps the scheduler off it;
- when it is Ready again the taint goes and pod readiness is recomputed;
- a node whose kubelet has heartbeated at least once and then stays silent for
  `node_monitor_grace` seconds of fleet time is marked Ready=Unknown
  ("Kubelet stopped posting node status.").
"""

from __future__ import annotations

from fleetsim.kube import events, pods
from fleetsim.kube.controllers.base import Context
from fleetsim.kube.errors import ApiError
from fleetsim.kube.store import Event, Obj

COMPONENT = "node-controller"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


class NodeLifecycleController:
    def __init__(self, ctx: Context, *, node_monitor_grace: float = 40.0) -> None:
        self.ctx = ctx
        self.node_monitor_grace = node_monitor_grace
        self._last_heartbeat: dict[str, float] = {}
        ctx.store.subscribe(self._on_node, resource="nodes")

    def heartbeat(self, name: str) -> None:
        """The kubelet on `name` reports in: the node is Ready and monitored from now on."""
        store = self.ctx.store
        self._last_heartbeat[name] = self.ctx.timers.clock.now()
        now = store.timestamp()
        node = store.get("nodes", name, copy=False)
        if not pods.node_ready(node):
            store.mutate(
                "nodes",
                name,
                lambda n: pods.set_condition(
                    n,
                    "Ready",
                    "True",
                    now,
                    reason="KubeletReady",
                    message="kubelet is posting ready status",
                    heartbeat=True,
                ),
            )
        self.ctx.timers.call_later(self.node_monitor_grace, lambda: self._check(name))

    def _check(self, name: str) -> None:
        last = self._last_heartbeat.get(name)
        if last is None:
            return
        if self.ctx.timers.clock.now() - last < self.node_monitor_grace:
            return
        now = self.ctx.store.timestamp()
        try:
            self.ctx.store.mutate(
                "nodes",
                name,
                lambda n: pods.set_condition(
                    n,
                    "Ready",
                    "Unknown",
                    now,
                    reason="NodeStatusUnknown",
                    message="Kubelet stopped posting node status.",
                ),
            )
        except ApiError:
            self._last_heartbeat.pop(name, None)

    def _on_node(self, event: Event) -> None:
        if event.type == "DELETED":
            self._last_heartbeat.pop(event.name, None)
            return
        node, old = event.object, event.old
        ready = pods.node_ready(node)
        was_ready = old is not None and pods.node_ready(old)
        state = (pods.condition(node, "Ready") or {}).get("status")
        old_state = (pods.condition(old, "Ready") or {}).get("status") if old else None
        if event.type == "MODIFIED" and state == old_state:
            return
        self._set_taint(node, state)
        if ready == was_ready and event.type == "MODIFIED":
            return
        if not ready and event.type == "MODIFIED":
            events.record(
                self.ctx.store,
                node,
                "Normal",
                "NodeNotReady",
                f"Node {event.name} status is now: NodeNotReady",
                component=COMPONENT,
            )
        self._refresh_pods(node)

    def _set_taint(self, node: Obj, state: str | None) -> None:
        wanted = {"False": NOT_READY_TAINT, "Unknown": UNREACHABLE_TAINT}.get(state or "Unknown")
        now = self.ctx.store.timestamp()

        def edit(n: Obj) -> None:
            spec = n.setdefault("spec", {})
            taints = [
                t
                for t in spec.get("taints") or []
                if t.get("key") not in (NOT_READY_TAINT, UNREACHABLE_TAINT)
                or t.get("key") == wanted
            ]
            if wanted and not any(t.get("key") == wanted for t in taints):
                taints.append({"key": wanted, "effect": "NoSchedule", "timeAdded": now})
            if taints:
                spec["taints"] = taints
            else:
                spec.pop("taints", None)

        self.ctx.store.mutate("nodes", node["metadata"]["name"], edit)

    def _refresh_pods(self, node: Obj) -> None:
        store = self.ctx.store
        name = node["metadata"]["name"]
        current = store.try_get("nodes", name, copy=False)
        now = store.timestamp()
        for pod in store.list("pods", field_selector=f"spec.nodeName={name}", copy=False):
            try:
                store.mutate(
                    "pods",
                    pod["metadata"]["name"],
                    lambda p: pods.refresh_ready(p, current, now),
                    namespace=pod["metadata"]["namespace"],
                )
            except ApiError:
                continue
