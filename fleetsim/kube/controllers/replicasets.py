"""ReplicaSets: keep `spec.replicas` matching pods alive, counting only what matches.

Called from the store's event stream for ReplicaSets and pods. Like the real
controller it counts the pods it controls that still match its selector and are
neither terminating nor finished. So:

- a deleted pod (even one still inside its grace period) is replaced at once;
- a pod that stops matching the selector (someone stripped `app=`) is released
  (its controller ownerReference removed) and replaced, while it keeps running on
  its node and keeps its GPUs: the runbook's warning, reproduced;
- a matching orphan pod is adopted, and surplus pods are deleted, least valuable
  first (unscheduled, then not ready, then newest).
"""

from __future__ import annotations

import contextlib

from fleetsim.kube import events, pods
from fleetsim.kube.controllers.base import Context
from fleetsim.kube.controllers.workloads import controller_uid, owner_ref, pod_from_template
from fleetsim.kube.errors import ApiError
from fleetsim.kube.selectors import from_spec
from fleetsim.kube.store import Event, Obj

COMPONENT = "replicaset-controller"


def _by_surplus(active: list[Obj]) -> list[Obj]:
    """Pods in the order the controller deletes them: unscheduled, not ready, newest."""
    newest_first = sorted(
        active, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True
    )
    return sorted(
        newest_first, key=lambda p: (1 if pods.node_name(p) else 0, 1 if pods.is_ready(p) else 0)
    )


def _same_but_status(old: Obj, new: Obj) -> bool:
    return (
        old.get("spec") == new.get("spec")
        and old["metadata"].get("labels") == new["metadata"].get("labels")
        and old["metadata"].get("deletionTimestamp") == new["metadata"].get("deletionTimestamp")
    )


class ReplicaSetController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        ctx.store.subscribe(self._on_rs, resource="replicasets")
        ctx.store.subscribe(self._on_pod, resource="pods")

    def _on_rs(self, event: Event) -> None:
        if event.type == "DELETED":
            return
        if event.old is not None and _same_but_status(event.old, event.object):
            return  # our own status write
        self.sync(event.namespace or "default", event.name)

    def _on_pod(self, event: Event) -> None:
        namespace = event.namespace or "default"
        objects = [event.object] + ([event.old] if event.old else [])
        if event.type == "MODIFIED" and event.old is not None:
            old, new = event.old, event.object
            # Readiness flips change status counts only; membership changes need more.
            if (
                old["metadata"].get("labels") == new["metadata"].get("labels")
                and old["metadata"].get("ownerReferences") == new["metadata"].get("ownerReferences")
                and pods.is_terminating(old) == pods.is_terminating(new)
                and pods.is_terminal(old) == pods.is_terminal(new)
                and pods.is_ready(old) == pods.is_ready(new)
            ):
                return
        for rs in self.ctx.store.list("replicasets", namespace=namespace, copy=False):
            uid = rs["metadata"]["uid"]
            selector = from_spec(rs["spec"].get("selector"))
            if any(
                controller_uid(o) == uid
                or (controller_uid(o) is None and selector.matches(o["metadata"].get("labels")))
                for o in objects
            ):
                self.sync(namespace, rs["metadata"]["name"])

    def sync(self, namespace: str, name: str) -> None:
        store = self.ctx.store
        rs = store.try_get("replicasets", name, namespace=namespace, copy=False)
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return
        uid = rs["metadata"]["uid"]
        selector = from_spec(rs["spec"].get("selector"))
        owned: list[Obj] = []
        for pod in store.list("pods", namespace=namespace, copy=False):
            pmeta = pod["metadata"]
            matches = selector.matches(pmeta.get("labels"))
            owner = controller_uid(pod)
            try:
                if owner == uid and not matches:
                    self._release(pod, uid)
                elif owner is None and matches and not pods.is_terminating(pod):
                    pod = self._adopt(pod, rs)
                    owned.append(pod)
                elif owner == uid:
                    owned.append(pod)
            except ApiError:
                continue
        active = [p for p in owned if not pods.is_terminating(p) and not pods.is_terminal(p)]
        want = int(rs["spec"].get("replicas", 1))
        if len(active) < want:
            for _ in range(want - len(active)):
                created = store.create(
                    "pods",
                    pod_from_template(rs["spec"]["template"], rs, generate_name=f"{name}-"),
                    namespace=namespace,
                )
                active.append(created)
                events.record(
                    store,
                    rs,
                    "Normal",
                    "SuccessfulCreate",
                    f"Created pod: {created['metadata']['name']}",
                    component=COMPONENT,
                )
        elif len(active) > want:
            for pod in _by_surplus(active)[: len(active) - want]:
                try:
                    store.delete("pods", pod["metadata"]["name"], namespace=namespace)
                except ApiError:
                    continue
                active.remove(pod)
                events.record(
                    store,
                    rs,
                    "Normal",
                    "SuccessfulDelete",
                    f"Deleted pod: {pod['metadata']['name']}",
                    component=COMPONENT,
                )
        self._status(rs, active)

    def _release(self, pod: Obj, uid: str) -> None:
        def edit(p: Obj) -> None:
            refs = [r for r in p["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                p["metadata"]["ownerReferences"] = refs
            else:
                p["metadata"].pop("ownerReferences", None)

        meta = pod["metadata"]
        self.ctx.store.mutate("pods", meta["name"], edit, namespace=meta["namespace"])

    def _adopt(self, pod: Obj, rs: Obj) -> Obj:
        def edit(p: Obj) -> None:
            p["metadata"].setdefault("ownerReferences", []).append(owner_ref(rs))

        meta = pod["metadata"]
        return self.ctx.store.mutate("pods", meta["name"], edit, namespace=meta["namespace"])

    def _status(self, rs: Obj, active: list[Obj]) -> None:
        fresh = [
            self.ctx.store.try_get(
                "pods", p["metadata"]["name"], namespace=p["metadata"]["namespace"], copy=False
            )
            for p in active
        ]
        live = [p for p in fresh if p is not None]
        ready = sum(1 for p in live if pods.is_ready(p))
        template_labels = (rs["spec"]["template"].get("metadata") or {}).get("labels") or {}
        labelled = sum(
            1
            for p in live
            if all(
                (p["metadata"].get("labels") or {}).get(k) == v for k, v in template_labels.items()
            )
        )
        status = {
            "replicas": len(live),
            "fullyLabeledReplicas": labelled,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        # As the Go type serialises it: every count but `replicas` is omitted when zero.
        status = {k: v for k, v in status.items() if v or k == "replicas"}

        def edit(r: Obj) -> None:
            r["status"] = status

        with contextlib.suppress(ApiError):
            self.ctx.store.mutate(
                "replicasets", rs["metadata"]["name"], edit, namespace=rs["metadata"]["namespace"]
            )
