"""Pod termination: a deleted pod leaves once its grace period has run out.

Called from the store's event stream. `Store.delete` only stamps a bound pod with
`deletionTimestamp`; this controller is the simulated kubelet's half of graceful
deletion and removes the pod after `deletionGracePeriodSeconds` of fleet time. The
fleet builder's kubelet may finish sooner (its replica process exited) with
`Store.remove`; a force delete (grace 0) never reaches here.
"""

from __future__ import annotations

from fleetsim.kube.controllers.base import Context
from fleetsim.kube.store import Event


class TerminationController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._scheduled: set[str] = set()
        ctx.store.subscribe(self._on_pod, resource="pods")

    def _on_pod(self, event: Event) -> None:
        meta = event.object["metadata"]
        uid = meta["uid"]
        if event.type == "DELETED":
            self._scheduled.discard(uid)
            return
        if not meta.get("deletionTimestamp") or uid in self._scheduled:
            return
        self._scheduled.add(uid)
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        name, namespace = meta["name"], meta.get("namespace")

        def finish() -> None:
            current = self.ctx.store.try_get("pods", name, namespace=namespace, copy=False)
            if current is not None and current["metadata"]["uid"] == uid:
                self.ctx.store.remove("pods", name, namespace=namespace)

        self.ctx.timers.call_later(grace, finish)
