"""Helpers the workload controllers share: owner references and pods from templates.

Called from the ReplicaSet, Deployment and LeaderWorkerSet controllers.
"""

from __future__ import annotations

import copy
from typing import Any

from fleetsim.kube.store import Obj


def owner_ref(owner: Obj, *, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def pod_from_template(
    template: Obj,
    owner: Obj,
    *,
    name: str | None = None,
    generate_name: str | None = None,
    extra_labels: dict[str, str] | None = None,
    extra_annotations: dict[str, str] | None = None,
) -> Obj:
    tmeta = template.get("metadata") or {}
    meta: dict[str, Any] = {
        "namespace": owner["metadata"].get("namespace"),
        "labels": {**(tmeta.get("labels") or {}), **(extra_labels or {})},
        "ownerReferences": [owner_ref(owner)],
    }
    annotations = {**(tmeta.get("annotations") or {}), **(extra_annotations or {})}
    if annotations:
        meta["annotations"] = annotations
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_name
    return {
        "metadata": meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
        "status": {"phase": "Pending"},
    }
