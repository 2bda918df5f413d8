"""Node lifecycle on the fleet clock: NotReady and a silent kubelet make pods unready."""

from __future__ import annotations

from fleetsim.clock import ManualClock
from fleetsim.kube.cluster import Cluster
from fleetsim.kube.pods import is_ready

from .conftest import NS, deployment, make_cluster, pod_names


def ready_pods(cluster: Cluster) -> list[str]:
    return sorted(
        p["metadata"]["name"] for p in cluster.store.list("pods", namespace=NS) if is_ready(p)
    )


def test_node_not_ready_marks_its_pods_not_ready_and_back() -> None:
    cluster = make_cluster((8, 8))
    cluster.store.create("deployments", deployment(replicas=2, gpus=8), namespace=NS)
    for pod in pod_names(cluster):
        cluster.set_pod_ready(NS, pod, True)
    victim = cluster.store.list("pods", namespace=NS, field_selector="spec.nodeName=gpu-0")[0]
    cluster.set_node_ready("gpu-0", False)
    pod = cluster.store.get("pods", victim["metadata"]["name"], namespace=NS)
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NodeNotReady")
    assert len(ready_pods(cluster)) == 1
    cluster.set_node_ready("gpu-0", True)
    assert len(ready_pods(cluster)) == 2


async def test_silent_kubelet_turns_the_node_unknown_after_the_monitor_grace() -> None:
    clock = ManualClock()
    cluster = Cluster(clock=clock, node_monitor_grace=40)
    cluster.add_namespace(NS)
    cluster.add_node("gpu-0", gpus=8)
    cluster.start()
    try:
        cluster.store.create("deployments", deployment(replicas=1, gpus=8), namespace=NS)
        (pod,) = pod_names(cluster)
        cluster.set_pod_ready(NS, pod, True)
        cluster.heartbeat_node("gpu-0")
        await cluster.advance(30)
        cluster.heartbeat_node("gpu-0")  # still alive at t=30
        await cluster.advance(39)
        assert ready_pods(cluster) == [pod]
        await cluster.advance(1)  # 40 s since the last heartbeat
        node = cluster.store.get("nodes", "gpu-0")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
        assert [t["key"] for t in node["spec"]["taints"]] == ["node.kubernetes.io/unreachable"]
        assert ready_pods(cluster) == []
    finally:
        cluster.stop()


async def test_graceful_delete_completes_after_the_grace_period_on_the_fleet_clock() -> None:
    clock = ManualClock()
    cluster = Cluster(clock=clock)
    cluster.add_namespace(NS)
    cluster.add_node("gpu-0", gpus=8)
    cluster.start()
    gone: list[str] = []
    terminating: list[str] = []
    cluster.on_pod_deleted(lambda p: gone.append(p["metadata"]["name"]))
    cluster.on_pod_terminating(lambda p: terminating.append(p["metadata"]["name"]))
    try:
        cluster.store.create("deployments", deployment(replicas=1, gpus=8), namespace=NS)
        (pod,) = pod_names(cluster)
        cluster.store.delete("pods", pod, namespace=NS)  # default 30 s grace
        assert terminating == [pod] and gone == []
        await cluster.advance(29)
        assert gone == []
        await cluster.advance(1)
        assert gone == [pod]
        # Its GPUs are free again, so the ReplicaSet's replacement is now bound.
        (replacement,) = cluster.store.list("pods", namespace=NS)
        assert replacement["spec"]["nodeName"] == "gpu-0"
    finally:
        cluster.stop()
