"""LeaderWorkerSets: replicas made of groups (one leader pod + size-1 worker pods).

Called from the store's event stream for LeaderWorkerSets and pods. Group `i` of LWS
`x` is the leader `x-i` and workers `x-i-1 .. x-i-(size-1)`, labelled as the real
controller labels them (`leaderworkerset.sigs.k8s.io/name`, `group-index`,
`worker-index`, `group-key`); workers are owned by their leader pod, so losing the
leader takes the workers with it (a group whose leader went is not repaired in
place, it is recreated).

A group is one unit of readiness. Every group pod carries the readiness gate
`leaderworkerset.sigs.k8s.io/group-ready` (standing in for the leader's probe of its
process group), which this controller sets True only while every rank exists and
has ready containers; so one lost or restarting rank turns the whole group
unready, and the leader's EndpointSlice endpoint with it. With
`restartPolicy: RecreateGroupOnPodRestart` (the default) a lost rank, a failed pod
or a container restart deletes the whole group, which is then recreated; with
`None` only the missing pod is recreated.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

from fleetsim.kube import pods
from fleetsim.kube.controllers.base import Context
from fleetsim.kube.controllers.workloads import owner_ref, pod_from_template
from fleetsim.kube.errors import ApiError
from fleetsim.kube.store import Event, Obj

PREFIX = "leaderworkerset.sigs.k8s.io/"
NAME_LABEL = PREFIX + "name"
GROUP_INDEX_LABEL = PREFIX + "group-index"
WORKER_INDEX_LABEL = PREFIX + "worker-index"
GROUP_KEY_LABEL = PREFIX + "group-key"
SIZE_ANNOTATION = PREFIX + "size"
LEADER_NAME_ANNOTATION = PREFIX + "leader-name"
GROUP_READY = PREFIX + "group-ready"


def group_key(namespace: str, lws: str, index: int) -> str:
    return hashlib.sha1(f"{namespace}/{lws}-{index}".encode()).hexdigest()


def _restarts(pod: Obj) -> int:
    return sum(
        int(s.get("restartCount", 0))
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    )


class LeaderWorkerSetController:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        ctx.store.subscribe(self._on_lws, resource="leaderworkersets")
        ctx.store.subscribe(self._on_pod, resource="pods")

    def _on_lws(self, event: Event) -> None:
        if event.type != "DELETED" and (
            event.old is None or event.old.get("spec") != event.object.get("spec")
        ):
            self.sync(event.namespace or "default", event.name)

    def _on_pod(self, event: Event) -> None:
        labels = event.object["metadata"].get("labels") or {}
        name = labels.get(NAME_LABEL)
        if not name:
            return
        if event.type == "MODIFIED" and event.old is not None:
            old, new = event.old, event.object
            if (
                pods.condition_true(old, "ContainersReady")
                == pods.condition_true(new, "ContainersReady")
                and pods.is_ready(old) == pods.is_ready(new)
                and pods.is_terminating(old) == pods.is_terminating(new)
                and pods.is_terminal(old) == pods.is_terminal(new)
                and _restarts(old) == _restarts(new)
            ):
                return
        self.sync(event.namespace or "default", name)

    def sync(self, namespace: str, name: str) -> None:
        store = self.ctx.store
        lws = store.try_get("leaderworkersets", name, namespace=namespace, copy=False)
        if lws is None or lws["metadata"].get("deletionTimestamp"):
            return
        spec = lws.get("spec") or {}
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = int(lwt.get("size", 1))
        replicas = int(spec.get("replicas", 1))
        recreate = lwt.get("restartPolicy", "RecreateGroupOnPodRestart") != "None"
        members: dict[int, dict[int, Obj]] = {}
        for pod in store.list(
            "pods", namespace=namespace, label_selector=f"{NAME_LABEL}={name}", copy=False
        ):
            labels = pod["metadata"]["labels"]
            try:
                group, rank = int(labels[GROUP_INDEX_LABEL]), int(labels[WORKER_INDEX_LABEL])
            except (KeyError, ValueError):
                continue
            members.setdefault(group, {})[rank] = pod
        ready_groups = 0
        for group in range(replicas):
            existing = members.get(group, {})
            try:
                if recreate and self._broken(existing, size):
                    self._delete_group(existing)
                    # Ranks still terminating leave the group's ready set now.
                    self._gate(namespace, group, name, size)
                    continue
                self._create_missing(lws, group, existing, size)
                if self._gate(namespace, group, name, size):
                    ready_groups += 1
            except ApiError:
                continue
        for group, existing in members.items():
            if group >= replicas:
                self._delete_group(existing)
        self._status(lws, replicas, ready_groups)

    def _broken(self, existing: dict[int, Obj], size: int) -> bool:
        """A group that lost a rank, or has a terminating, failed or restarted pod."""
        if not existing:
            return False
        if any(pods.is_terminating(p) for p in existing.values()):
            return True
        if any(pods.is_terminal(p) or _restarts(p) > 0 for p in existing.values()):
            return True
        # The controller creates a group's pods together, so a leader with ranks
        # missing lost them.
        return 0 not in existing or len(existing) < size

    def _delete_group(self, existing: dict[int, Obj]) -> None:
        for pod in existing.values():
            if pods.is_terminating(pod):
                continue
            try:
                self.ctx.store.delete(
                    "pods", pod["metadata"]["name"], namespace=pod["metadata"]["namespace"]
                )
            except ApiError:
                continue

    def _create_missing(self, lws: Obj, group: int, existing: dict[int, Obj], size: int) -> None:
        store = self.ctx.store
        namespace = lws["metadata"]["namespace"]
        name = lws["metadata"]["name"]
        lwt = lws["spec"]["leaderWorkerTemplate"]
        worker_template = lwt.get("workerTemplate") or {}
        leader_template = lwt.get("leaderTemplate") or worker_template
        leader_name = f"{name}-{group}"
        common = {
            NAME_LABEL: name,
            GROUP_INDEX_LABEL: str(group),
            GROUP_KEY_LABEL: group_key(namespace, name, group),
        }
        leader = existing.get(0)
        if leader is None:
            if store.try_get("pods", leader_name, namespace=namespace, copy=False) is not None:
                return  # the previous leader is still terminating; wait for it
            leader = store.create(
                "pods",
                self._with_gate(
                    pod_from_template(
                        leader_template,
                        lws,
                        name=leader_name,
                        extra_labels={**common, WORKER_INDEX_LABEL: "0"},
                        extra_annotations={SIZE_ANNOTATION: str(size)},
                    )
                ),
                namespace=namespace,
            )
        for rank in range(1, size):
            if rank in existing:
                continue
            worker_name = f"{leader_name}-{rank}"
            if store.try_get("pods", worker_name, namespace=namespace, copy=False) is not None:
                continue
            pod = self._with_gate(
                pod_from_template(
                    worker_template,
                    lws,
                    name=worker_name,
                    extra_labels={**common, WORKER_INDEX_LABEL: str(rank)},
                    extra_annotations={
                        SIZE_ANNOTATION: str(size),
                        LEADER_NAME_ANNOTATION: leader_name,
                    },
                )
            )
            pod["metadata"]["ownerReferences"] = [owner_ref(leader)]
            store.create("pods", pod, namespace=namespace)

    @staticmethod
    def _with_gate(pod: Obj) -> Obj:
        gates: list[dict[str, Any]] = pod["spec"].setdefault("readinessGates", [])
        if not any(g.get("conditionType") == GROUP_READY for g in gates):
            gates.append({"conditionType": GROUP_READY})
        return pod

    def _gate(self, namespace: str, group: int, name: str, size: int) -> bool:
        """Set every member's group-ready gate; True if the group is whole and ready."""
        store = self.ctx.store
        current = store.list(
            "pods",
            namespace=namespace,
            label_selector=f"{NAME_LABEL}={name},{GROUP_INDEX_LABEL}={group}",
            copy=False,
        )
        whole = len(current) == size and all(
            pods.condition_true(p, "ContainersReady") and not pods.is_terminating(p)
            for p in current
        )
        for pod in current:
            gate = pods.condition(pod, GROUP_READY)
            if gate is None or (gate.get("status") == "True") != whole:
                pods.update_readiness(
                    store, namespace, pod["metadata"]["name"], gate=(GROUP_READY, whole)
                )
        return whole

    def _status(self, lws: Obj, replicas: int, ready_groups: int) -> None:
        name = lws["metadata"]["name"]
        now = self.ctx.store.timestamp()

        def edit(obj: Obj) -> None:
            status = obj.setdefault("status", {})
            status.update(
                replicas=replicas,
                readyReplicas=ready_groups,
                updatedReplicas=replicas,
                hpaPodSelector=f"{NAME_LABEL}={name},{WORKER_INDEX_LABEL}=0",
            )
            available = ready_groups >= replicas
            pods.set_condition(
                obj,
                "Available",
                "True" if available else "False",
                now,
                reason="AllGroupsReady" if available else "GroupsNotReady",
            )
            for cond in status["conditions"]:
                cond.pop("lastProbeTime", None)

        with contextlib.suppress(ApiError):
            self.ctx.store.mutate(
                "leaderworkersets", name, edit, namespace=lws["metadata"]["namespace"]
            )
