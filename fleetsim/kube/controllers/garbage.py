"""Garbage collection: dependents go when their last owner goes (background cascade).

Called from the store's event stream on every DELETED event. Deleting a Deployment
removes its ReplicaSets and their pods, deleting a Service removes its
EndpointSlices, and deleting a LeaderWorkerSet leader pod removes its workers, all
through `metadata.ownerReferences`, as the real garbage collector does; deleting a
namespace removes everything in it. Pods go
through the normal graceful delete. `propagationPolicy=Orphan` is handled by the
store, which strips the owner reference before the owner goes.
"""

from __future__ import annotations

import contextlib

from fleetsim.kube.controllers.base import Context
from fleetsim.kube.errors import NotFound
from fleetsim.kube.resources import RESOURCES
from fleetsim.kube.store import Event


class GarbageCollector:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        ctx.store.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.type != "DELETED":
            return
        if event.resource.kind == "Namespace":
            self._empty_namespace(event.name)
            return
        uid = event.object["metadata"]["uid"]
        namespace = event.namespace
        store = self.ctx.store
        for res in RESOURCES:
            # Events are many and never owned; scanning them would dominate each delete.
            if not res.namespaced or res.plural == "events":
                continue
            for obj in store.list(res, namespace=namespace, copy=False):
                refs = obj["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    continue
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                if any(r.get("uid") != uid and self._owner_alive(r, namespace) for r in refs):
                    continue
                with contextlib.suppress(NotFound):
                    store.delete(
                        res, obj["metadata"]["name"], namespace=obj["metadata"].get("namespace")
                    )

    def _empty_namespace(self, namespace: str) -> None:
        """A deleted namespace takes everything in it along (pods without waiting)."""
        store = self.ctx.store
        for res in RESOURCES:
            if not res.namespaced:
                continue
            for obj in store.list(res, namespace=namespace, copy=False):
                with contextlib.suppress(NotFound):
                    store.remove(res, obj["metadata"]["name"], namespace=namespace)

    def _owner_alive(self, ref: dict[str, str], namespace: str | None) -> bool:
        for res in RESOURCES:
            if res.kind == ref.get("kind"):
                owner = self.ctx.store.try_get(
                    res, ref.get("name", ""), namespace=namespace, copy=False
                )
                return owner is not None and owner["metadata"]["uid"] == ref.get("uid")
        return False
