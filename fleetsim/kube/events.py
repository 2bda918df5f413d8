"""Kubernetes Events (core/v1) written by the simulated controllers.

Called from the scheduler (Scheduled / FailedScheduling), the ReplicaSet and
Deployment controllers (SuccessfulCreate, ScalingReplicaSet) and the node controller.
`kubectl describe pod` lists them through a field selector on involvedObject, and a
repeat of the same event bumps `count` instead of adding a row, as the real recorder
does.
"""

from __future__ import annotations

import hashlib

from fleetsim.kube.store import Obj, Store


def record(
    store: Store,
    obj: Obj,
    type_: str,
    reason: str,
    message: str,
    *,
    component: str,
) -> Obj:
    meta = obj["metadata"]
    namespace = meta.get("namespace") or "default"
    now = store.timestamp()
    digest = hashlib.sha1(f"{meta.get('uid')}/{type_}/{reason}/{message}".encode()).hexdigest()
    name = f"{meta['name']}.{digest[:16]}"
    existing = store.try_get("events", name, namespace=namespace, copy=False)
    if existing is not None:

        def bump(ev: Obj) -> None:
            ev["count"] = int(ev.get("count", 1)) + 1
            ev["lastTimestamp"] = now

        return store.mutate("events", name, bump, namespace=namespace)
    return store.create(
        "events",
        {
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "kind": obj.get("kind"),
                "namespace": meta.get("namespace"),
                "name": meta["name"],
                "uid": meta.get("uid"),
                "apiVersion": obj.get("apiVersion"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": component},
            "reportingComponent": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        },
        namespace=namespace,
    )
