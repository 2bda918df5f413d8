"""Deployments: own one ReplicaSet per pod template and size it to `spec.replicas`.

Called from the store's event stream for Deployments and ReplicaSets. The current
template's ReplicaSet is `{name}-{pod-template-hash}` and selects on the
Deployment's selector plus `pod-template-hash`; older ReplicaSets are scaled to 0
(a template change behaves like the Recreate strategy; rolling surges are not
simulated). Scaling, through `spec.replicas` or the scale subresource, resizes
the current ReplicaSet. Status is rolled up from the ReplicaSets so
`kubectl get deploy -o jsonpath='{.status.readyReplicas}'` answers as the runbook
expects.
"""

from __future__ import annotations

import contextlib
import hashlib
import json

from fleetsim.kube import events
from fleetsim.kube.controllers.base import Context
from fleetsim.kube.controllers.workloads import controller_uid, owner_ref
from fleetsim.kube.errors import ApiError
from fleetsim.kube.pods import set_condition
from fleetsim.kube.store import Event, Obj

COMPONENT = "deployment-controller"
HASH_LABEL = "pod-template-hash"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def template_hash(template: Obj) -> str:
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:10])


class DeploymentController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        ctx.store.subscribe(self._on_deployment, resource="deployments")
        ctx.store.subscribe(self._on_rs, resource="replicasets")

    def _on_deployment(self, event: Event) -> None:
        if event.type == "DELETED":
            return
        if event.old is not None and event.old.get("spec") == event.object.get("spec"):
            return  # a status or metadata change: nothing to reconcile
        self.sync(event.namespace or "default", event.name)

    def _on_rs(self, event: Event) -> None:
        if (
            event.type == "MODIFIED"
            and event.old is not None
            and (
                event.old.get("status") == event.object.get("status")
                and event.old.get("spec") == event.object.get("spec")
            )
        ):
            return
        for ref in event.object["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Deployment" and ref.get("controller"):
                self.sync(event.namespace or "default", ref["name"])

    def sync(self, namespace: str, name: str) -> None:
        store = self.ctx.store
        dep = store.try_get("deployments", name, namespace=namespace, copy=False)
        if dep is None or dep["metadata"].get("deletionTimestamp"):
            return
        uid = dep["metadata"]["uid"]
        template = dep["spec"]["template"]
        phash = template_hash(template)
        want = int(dep["spec"].get("replicas", 1))
        owned = [
            rs
            for rs in store.list("replicasets", namespace=namespace, copy=False)
            if controller_uid(rs) == uid
        ]
        current = next(
            (rs for rs in owned if (rs["metadata"].get("labels") or {}).get(HASH_LABEL) == phash),
            None,
        )
        try:
            if current is None:
                current = store.create(
                    "replicasets", self._new_rs(dep, phash, want), namespace=namespace
                )
                events.record(
                    store,
                    dep,
                    "Normal",
                    "ScalingReplicaSet",
                    f"Scaled up replica set {current['metadata']['name']} to {want}",
                    component=COMPONENT,
                )
            elif int(current["spec"].get("replicas", 1)) != want:
                before = int(current["spec"].get("replicas", 1))
                current = store.patch(
                    "replicasets",
                    current["metadata"]["name"],
                    {"spec": {"replicas": want}},
                    namespace=namespace,
                )
                verb = "up" if want > before else "down"
                events.record(
                    store,
                    dep,
                    "Normal",
                    "ScalingReplicaSet",
                    f"Scaled {verb} replica set {current['metadata']['name']} "
                    f"from {before} to {want}",
                    component=COMPONENT,
                )
            for rs in owned:
                if rs["metadata"]["uid"] != current["metadata"]["uid"] and rs["spec"].get(
                    "replicas", 1
                ):
                    store.patch(
                        "replicasets",
                        rs["metadata"]["name"],
                        {"spec": {"replicas": 0}},
                        namespace=namespace,
                    )
        except ApiError:
            return
        self._status(dep, current, owned)

    def _new_rs(self, dep: Obj, phash: str, replicas: int) -> Obj:
        template = json.loads(json.dumps(dep["spec"]["template"]))
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), HASH_LABEL: phash}
        selector = json.loads(json.dumps(dep["spec"]["selector"]))
        selector.setdefault("matchLabels", {})[HASH_LABEL] = phash
        return {
            "metadata": {
                "name": f"{dep['metadata']['name']}-{phash}",
                "labels": dict(tmeta["labels"]),
                "annotations": {"deployment.kubernetes.io/revision": "1"},
                "ownerReferences": [owner_ref(dep)],
            },
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }

    def _status(self, dep: Obj, current: Obj, owned: list[Obj]) -> None:
        store = self.ctx.store
        namespace = dep["metadata"]["namespace"]
        sets = [
            store.try_get("replicasets", rs["metadata"]["name"], namespace=namespace, copy=False)
            for rs in owned
        ]
        if all(rs is None or rs["metadata"]["uid"] != current["metadata"]["uid"] for rs in sets):
            sets.append(
                store.try_get(
                    "replicasets", current["metadata"]["name"], namespace=namespace, copy=False
                )
            )
        live = [rs for rs in sets if rs is not None]
        total = sum(int((rs.get("status") or {}).get("replicas", 0)) for rs in live)
        ready = sum(int((rs.get("status") or {}).get("readyReplicas", 0)) for rs in live)
        updated = next(
            (
                int((rs.get("status") or {}).get("replicas", 0))
                for rs in live
                if rs["metadata"]["uid"] == current["metadata"]["uid"]
            ),
            0,
        )
        want = int(dep["spec"].get("replicas", 1))
        now = store.timestamp()

        def edit(d: Obj) -> None:
            status = d.setdefault("status", {})
            status.update(
                observedGeneration=d["metadata"].get("generation", 1),
                replicas=total,
                updatedReplicas=updated,
                readyReplicas=ready,
                availableReplicas=ready,
                unavailableReplicas=max(0, want - ready),
            )
            # The API's Go types drop zero counts (omitempty); readers must cope with absence.
            for field in (
                "replicas",
                "updatedReplicas",
                "readyReplicas",
                "availableReplicas",
                "unavailableReplicas",
            ):
                if not status.get(field):
                    status.pop(field, None)
            if ready >= want:
                set_condition(
                    d,
                    "Available",
                    "True",
                    now,
                    reason="MinimumReplicasAvailable",
                    message="Deployment has minimum availability.",
                )
            else:
                set_condition(
                    d,
                    "Available",
                    "False",
                    now,
                    reason="MinimumReplicasUnavailable",
                    message="Deployment does not have minimum availability.",
                )
            for cond in status.get("conditions", []):
                cond.pop("lastProbeTime", None)
                cond.setdefault("lastUpdateTime", now)

        with contextlib.suppress(ApiError):
            store.mutate("deployments", dep["metadata"]["name"], edit, namespace=namespace)
