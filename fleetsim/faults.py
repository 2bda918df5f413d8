"""Fault injection, and the alerts each fault makes Alertmanager send.

Called by `Fleet.inject` (from the timed fault script, from tests and from the drill).
`inject` resolves the scenario's target (pool replica by ordinal, node by name or
rack), applies the fault through the kubelet, the DCGM exporters, the store or the
traffic generators, and returns the alerts Prometheus rules would fire for it, in
Alertmanager's API shape, so the drill can POST them to Alertmanager.

Alert labels (see `fleetsim.contract`): every alert carries `alertname`, `severity`,
`namespace`, `pool` and `fault` (a `workflows.types.FaultKind` value), plus `pod`,
`node`, `zone`, `rack` where the fault has them, `gpu` and `xid` for Xid errors and
`group` and `rank` for a lost rank. `expected_alerts(fault)` gives the same alerts
before injection, with only what the scenario itself determines (no pod names).

| fault kind          | alertname                  | fault label     |
|---------------------|----------------------------|-----------------|
| node-not-ready      | FleetmendNodeNotReady      | node-not-ready  |
| pod-oom-killed      | FleetmendPodOOMKilled      | pod-oom-killed  |
| pod-evicted         | FleetmendPodEvicted        | pod-evicted     |
| node-disk-full      | FleetmendPodEvicted        | pod-evicted     |
| rank-lost           | FleetmendRankLost          | rank-lost       |
| gpu-xid             | FleetmendGPUXidError       | gpu-xid         |
| fake-alive          | FleetmendReplicaNoTraffic  | no-traffic      |
| bad-rollout         | FleetmendPodCrashLooping   | pod-crashloop   |
| demand-surge, image-pull-failure, kube-api | (none: no replica is lost by them alone) | |
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fleetsim import contract as c
from fleetsim.engine import Health
from fleetsim.kube import pods as kpods
from fleetsim.kube.store import Obj
from fleetsim.scenario import Fault

if TYPE_CHECKING:
    from fleetsim.fleet import Fleet
    from fleetsim.kubelet import PodRuntime


@dataclass(frozen=True)
class AlertSpec:
    alertname: str
    fault: str
    severity: str = "critical"


ALERTS: dict[str, AlertSpec | None] = {
    "node-not-ready": AlertSpec(c.ALERT_NODE_NOT_READY, "node-not-ready"),
    "pod-oom-killed": AlertSpec(c.ALERT_POD_OOM_KILLED, "pod-oom-killed"),
    "pod-evicted": AlertSpec(c.ALERT_POD_EVICTED, "pod-evicted"),
    "node-disk-full": AlertSpec(c.ALERT_POD_EVICTED, "pod-evicted"),
    "rank-lost": AlertSpec(c.ALERT_RANK_LOST, "rank-lost"),
    "gpu-xid": AlertSpec(c.ALERT_GPU_XID, "gpu-xid"),
    "fake-alive": AlertSpec(c.ALERT_NO_TRAFFIC, "no-traffic", "warning"),
    "bad-rollout": AlertSpec(c.ALERT_POD_CRASHLOOP, "pod-crashloop", "warning"),
    "demand-surge": None,
    "image-pull-failure": None,
    "kube-api": None,
}

_SUMMARY = {
    "node-not-ready": "Node {node} is NotReady; replica {pod} went with it",
    "pod-oom-killed": "Serving pod {pod} was OOM-killed",
    "pod-evicted": "Serving pod {pod} was evicted from {node}",
    "rank-lost": "Rank {rank} of group {group} ({pod}) was lost; the group cannot serve",
    "gpu-xid": "Xid {xid} on GPU {gpu} of {node}, under serving pod {pod}",
    "no-traffic": "Replica {pod} answers nothing (no successful requests)",
    "pod-crashloop": "Pods of {pool} are crash-looping after a rollout",
}


@dataclass(frozen=True)
class Alert:
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    # The node rule reads kube_node_status_condition, so its alert exists only once the
    # node controller marked the node NotReady/Unknown (after the node-monitor grace), not
    # when the kubelet fell silent: `Fleet.firing` holds it back until then.
    awaits_node_not_ready: str | None = None
    # KubePodCrashLooping is per pod: a rollout's alert names no pod until the new
    # revision's pods crash, then fires once for each (`Fleet.firing`).
    per_crash_looping_pod: bool = False

    def to_alertmanager(self) -> dict[str, Any]:
        """One element of Alertmanager's `POST /api/v2/alerts` body."""
        return {
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "startsAt": self.starts_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


@dataclass
class InjectedFault:
    fault: Fault
    at: float  # fleet time (seconds since the fleet started)
    pods: list[str] = field(default_factory=list)  # namespace/name
    nodes: list[str] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)


class FaultError(ValueError):
    """The target does not exist in the running fleet (no such replica, node or rack)."""


def expected_alerts(fault: Fault) -> list[dict[str, str]]:
    """The labels a fault's alerts will carry, as far as the scenario alone fixes them."""
    spec = ALERTS[fault.kind]
    if spec is None:
        return []
    labels = {"alertname": spec.alertname, "severity": spec.severity, "fault": spec.fault}
    t = fault.target
    for key, value in (
        ("namespace", t.namespace),
        ("pool", t.pool),
        ("node", t.node),
        ("rack", t.rack),
    ):
        if value is not None:
            labels[key] = value
    if fault.kind == "gpu-xid":
        labels["xid"] = str(fault.xid)
    if fault.kind == "rank-lost":
        labels["rank"] = str(t.rank)
    return [labels]


class Injector:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.kubelet = fleet.kubelet
        self.store = fleet.cluster.store

    # --- target resolution -------------------------------------------------------------

    def replicas(self, namespace: str, pool: str) -> list[Obj]:
        """The pool's serving replicas (leaders for groups), live, sorted by name."""
        selector = f"{c.LABEL_APP}={pool},{c.LABEL_POOL}={c.POOL_SERVING}"
        out = []
        for p in self.store.list("pods", namespace=namespace, label_selector=selector):
            labels = p["metadata"].get("labels") or {}
            if labels.get(c.LABEL_LWS_WORKER_INDEX, "0") != "0":
                continue
            if kpods.is_terminal(p) or kpods.is_terminating(p) or not kpods.node_name(p):
                continue
            out.append(p)
        return sorted(out, key=lambda p: p["metadata"]["name"])

    def _target_pods(self, fault: Fault) -> list[Obj]:
        t = fault.target
        assert t.namespace is not None and t.pool is not None
        live = self.replicas(t.namespace, t.pool)
        first = t.replica or 0
        chosen = live[first : first + t.count]
        if not chosen:
            raise FaultError(
                f"{fault.kind}: no replica {first} in {t.namespace}/{t.pool} ({len(live)} live)"
            )
        return chosen

    def _target_nodes(self, fault: Fault) -> list[str]:
        t = fault.target
        if t.node is not None:
            return [t.node]
        if t.rack is not None:
            nodes = self.store.list("nodes", label_selector=f"{c.LABEL_RACK}={t.rack}")
            if not nodes:
                raise FaultError(f"{fault.kind}: no nodes in rack {t.rack}")
            return sorted(n["metadata"]["name"] for n in nodes)
        return sorted({kpods.node_name(p) for p in self._target_pods(fault)})

    def _runtime(self, pod: Obj) -> PodRuntime:
        rt = self.kubelet.pods.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        if rt is None:
            raise FaultError(f"pod {pod['metadata']['name']} is not running on any kubelet")
        return rt

    # --- alerts ------------------------------------------------------------------------

    def _alert(self, fault: Fault, pod: Obj | None, **extra: str) -> Alert:
        spec = ALERTS[fault.kind]
        assert spec is not None
        labels = {"alertname": spec.alertname, "severity": spec.severity, "fault": spec.fault}
        if pod is not None:
            meta = pod["metadata"]
            pod_labels = meta.get("labels") or {}
            labels.update(
                namespace=meta["namespace"],
                pool=pod_labels.get(c.LABEL_APP, ""),
                pod=meta["name"],
                node=kpods.node_name(pod),
            )
        labels.update({k: v for k, v in extra.items() if v})
        node_name = labels.get("node")
        if node_name:
            node = self.store.try_get("nodes", node_name)
            node_labels = (node or {}).get("metadata", {}).get("labels") or {}
            for key, label in (("zone", c.LABEL_ZONE), ("rack", c.LABEL_RACK)):
                if label in node_labels:
                    labels.setdefault(key, node_labels[label])
        fmt = {k: labels.get(k, "") for k in ("node", "pod", "pool", "xid", "gpu", "rank", "group")}
        summary = _SUMMARY[spec.fault].format(**fmt)
        return Alert(
            labels=labels,
            annotations={"summary": summary, "description": f"fleetsim fault {fault.kind}"},
            starts_at=self.store.now(),
        )

    # --- injection ---------------------------------------------------------------------

    def inject(self, fault: Fault) -> InjectedFault:
        result = InjectedFault(fault=fault, at=self.fleet.now())
        handler = getattr(self, "_" + fault.kind.replace("-", "_"))
        handler(fault, result)
        return result

    def _node_not_ready(self, fault: Fault, out: InjectedFault) -> None:
        for node in self._target_nodes(fault):
            victims = [
                p
                for p in self.store.list("pods", field_selector=f"spec.nodeName={node}")
                if (p["metadata"].get("labels") or {}).get(c.LABEL_POOL)
                in (c.POOL_SERVING, c.POOL_WARM)
                and not kpods.is_terminal(p)
            ]
            self.kubelet.node_down(node)
            self._annotate("nodes", node, None, fault.kind)
            out.nodes.append(node)
            for pod in victims:
                out.pods.append(_ref(pod))
                if (pod["metadata"].get("labels") or {}).get(c.LABEL_POOL) == c.POOL_SERVING:
                    alert = self._alert(fault, pod)
                    out.alerts.append(replace(alert, awaits_node_not_ready=node))

    def _pod_oom_killed(self, fault: Fault, out: InjectedFault) -> None:
        for pod in self._target_pods(fault):
            self.kubelet.kill_container(self._runtime(pod), reason="OOMKilled", exit_code=137)
            out.pods.append(_ref(pod))
            out.alerts.append(self._alert(fault, pod))

    def _pod_evicted(self, fault: Fault, out: InjectedFault) -> None:
        for pod in self._target_pods(fault):
            self.kubelet.evict(
                self._runtime(pod),
                "The node was low on resource: memory. Threshold quantity: 100Mi",
            )
            out.pods.append(_ref(pod))
            out.alerts.append(self._alert(fault, pod))

    def _rank_lost(self, fault: Fault, out: InjectedFault) -> None:
        rank = fault.target.rank
        for leader in self._target_pods(fault):
            leader_rt = self._runtime(leader)
            worker_name = (
                leader["metadata"]["name"] if rank == 0 else f"{leader['metadata']['name']}-{rank}"
            )
            worker = self.store.try_get(
                "pods", worker_name, namespace=leader["metadata"]["namespace"]
            )
            if worker is None:
                raise FaultError(f"rank-lost: no rank {rank} pod {worker_name}")
            # The survivors' collectives hang on the missing peer before anything restarts.
            self.kubelet.set_health(leader_rt, Health.GROUP_BROKEN)
            self.kubelet.kill_container(self._runtime(worker), reason="Error", exit_code=1)
            group = (leader["metadata"].get("labels") or {}).get(c.LABEL_LWS_GROUP_INDEX, "")
            out.pods.append(_ref(worker))
            out.alerts.append(
                self._alert(
                    fault, leader, node=kpods.node_name(worker), group=group, rank=str(rank)
                )
            )

    def _gpu_xid(self, fault: Fault, out: InjectedFault) -> None:
        if fault.target.pool is not None:
            targets = [(p, self._runtime(p)) for p in self._target_pods(fault)]
        else:
            assert fault.target.node is not None
            node = fault.target.node
            holders = [rt for rt in self.kubelet.pods_on(node) if rt.gpus]
            targets = []
            for rt in holders[:1]:
                targets.append((self.store.get("pods", rt.name, namespace=rt.namespace), rt))
            if not targets:
                self.fleet.node_gpus[node].record_xid(0, fault.xid)
                out.nodes.append(node)
                return
        for pod, rt in targets:
            index = rt.gpus[0] if rt.gpus else 0
            self.fleet.node_gpus[rt.node].record_xid(index, fault.xid)
            if fault.xid == 79:
                self.kubelet.set_health(rt, Health.GPU_HUNG)
            elif fault.xid in (48, 95, 13, 31, 43):
                self.kubelet.set_health(rt, Health.GPU_ERROR)
            out.pods.append(_ref(pod))
            out.nodes.append(rt.node)
            out.alerts.append(self._alert(fault, pod, gpu=str(index), xid=str(fault.xid)))

    def _fake_alive(self, fault: Fault, out: InjectedFault) -> None:
        for pod in self._target_pods(fault):
            self.kubelet.set_health(self._runtime(pod), Health.FAKE_ALIVE)
            out.pods.append(_ref(pod))
            out.alerts.append(self._alert(fault, pod))

    def _demand_surge(self, fault: Fault, out: InjectedFault) -> None:
        t = fault.target
        for gen in self.fleet.traffic:
            if gen.spec.namespace == t.namespace and gen.spec.pool == t.pool:
                gen.surge(fault.factor, fault.duration_s)

    def _image_pull_failure(self, fault: Fault, out: InjectedFault) -> None:
        t = fault.target
        assert t.namespace is not None and t.pool is not None
        self.kubelet.broken_registry.add((t.namespace, t.pool))

    def _kube_api(self, fault: Fault, out: InjectedFault) -> None:
        assert fault.api is not None
        self.fleet.kube_server.chaos.open(fault.api)

    def _node_disk_full(self, fault: Fault, out: InjectedFault) -> None:
        message = "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi"
        now = self.store.timestamp()
        for node in self._target_nodes(fault):
            self.kubelet.disk_full_nodes.add(node)

            def edit(n: Obj) -> None:
                kpods.set_condition(
                    n,
                    "DiskPressure",
                    "True",
                    now,
                    reason="KubeletHasDiskPressure",
                    message="kubelet has disk pressure",
                )
                taints = n.setdefault("spec", {}).setdefault("taints", [])
                if not any(t.get("key") == "node.kubernetes.io/disk-pressure" for t in taints):
                    taints.append(
                        {
                            "key": "node.kubernetes.io/disk-pressure",
                            "effect": "NoSchedule",
                            "timeAdded": now,
                        }
                    )
                n["metadata"].setdefault("annotations", {})[c.ANNOTATION_FAULT] = fault.kind

            self.store.mutate("nodes", node, edit)
            out.nodes.append(node)
            for rt in list(self.kubelet.pods_on(node)):
                if rt.role not in ("replica", "worker"):
                    continue
                pod = self.store.try_get("pods", rt.name, namespace=rt.namespace)
                if pod is None or kpods.is_terminal(pod):
                    continue
                self.kubelet.evict(rt, message)
                out.pods.append(_ref(pod))
                if (pod["metadata"].get("labels") or {}).get(c.LABEL_POOL) == c.POOL_SERVING:
                    out.alerts.append(self._alert(fault, pod))

    def _bad_rollout(self, fault: Fault, out: InjectedFault) -> None:
        t = fault.target
        assert t.namespace is not None and t.pool is not None
        pool = self.fleet.scenario.pool(t.namespace, t.pool)
        bad = f"{pool.revision}-next"
        self.kubelet.bad_revisions.add(bad)

        def edit(d: Obj) -> None:
            tmpl = d["spec"]["template"]
            tmpl["metadata"]["labels"][c.LABEL_MODEL_REVISION] = bad
            for container in tmpl["spec"]["containers"]:
                container["image"] = container["image"].rsplit(":", 1)[0] + ":nightly"

        kind = "leaderworkersets" if pool.group_size > 1 else "deployments"
        if kind == "deployments":
            self.store.mutate(kind, t.pool, edit, namespace=t.namespace)
        else:

            def edit_lws(obj: Obj) -> None:
                lwt = obj["spec"]["leaderWorkerTemplate"]
                for key in ("leaderTemplate", "workerTemplate"):
                    if key in lwt:
                        edit({"spec": {"template": lwt[key]}})

            self.store.mutate(kind, t.pool, edit_lws, namespace=t.namespace)
        alert = self._alert(fault, None, namespace=t.namespace, pool=t.pool)
        out.alerts.append(replace(alert, per_crash_looping_pod=True))

    def _annotate(self, resource: str, name: str, namespace: str | None, value: str) -> None:
        def edit(obj: Obj) -> None:
            obj["metadata"].setdefault("annotations", {})[c.ANNOTATION_FAULT] = value

        self.store.mutate(resource, name, edit, namespace=namespace)


def _ref(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
