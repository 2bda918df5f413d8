"""The scheduler binds by free nvidia.com/gpu and explains, as kube-scheduler does, when it cannot."""

from __future__ import annotations

from typing import Any

from fleetsim.kube.cluster import Cluster

from .conftest import NS, llm_template, make_cluster


def gpu_pod(cluster: Cluster, name: str, gpus: int, **spec: Any) -> dict[str, Any]:
    body = {"metadata": {"name": name}, "spec": {**llm_template(gpus)["spec"], **spec}}
    cluster.store.create("pods", body, namespace=NS)
    return cluster.store.get("pods", name, namespace=NS)


def failed_scheduling(cluster: Cluster, pod: str) -> list[str]:
    return [
        e["message"]
        for e in cluster.store.list(
            "events",
            namespace=NS,
            field_selector=f"involvedObject.name={pod},reason=FailedScheduling",
        )
    ]


def test_bound_pod_gets_node_ip_phase_and_a_scheduled_event() -> None:
    cluster = make_cluster((8,))
    seen: list[str] = []
    cluster.on_pod_scheduled(lambda p: seen.append(p["status"]["podIP"]))
    pod = gpu_pod(cluster, "p", 4)
    assert pod["spec"]["nodeName"] == "gpu-0"
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"].startswith("127.10.")
    assert seen == [pod["status"]["podIP"]]
    reasons = [e["reason"] for e in cluster.store.list("events", namespace=NS)]
    assert "Scheduled" in reasons


def test_pod_ips_are_unique_loopback_addresses() -> None:
    cluster = make_cluster((8, 8))
    ips = [gpu_pod(cluster, f"p{i}", 1)["status"]["podIP"] for i in range(10)]
    assert len(set(ips)) == 10
    assert all(ip.startswith("127.") for ip in ips)


def test_fragmented_gpus_leave_the_pod_pending_with_insufficient_gpu() -> None:
    cluster = make_cluster((8, 8, 8))
    for i in range(3):
        gpu_pod(cluster, f"filler-{i}", 4)  # spreads: 4 free on each node, 12 in total
    assert sum(n["free"] for n in cluster.gpu_summary().values()) == 12
    pod = gpu_pod(cluster, "big", 8)
    assert pod["status"]["phase"] == "Pending" and "nodeName" not in pod["spec"]
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"
    (message,) = failed_scheduling(cluster, "big")
    assert message.startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")


def test_pending_pod_is_bound_once_capacity_frees() -> None:
    cluster = make_cluster((8,))
    gpu_pod(cluster, "holder", 8)
    assert "nodeName" not in gpu_pod(cluster, "waiting", 8)["spec"]
    cluster.store.delete("pods", "holder", namespace=NS, grace_period_seconds=0)
    assert cluster.store.get("pods", "waiting", namespace=NS)["spec"]["nodeName"] == "gpu-0"


def test_terminating_pods_still_hold_their_gpus() -> None:
    cluster = make_cluster((8,))
    gpu_pod(cluster, "holder", 8)
    cluster.store.delete("pods", "holder", namespace=NS)  # graceful: still terminating
    assert "nodeName" not in gpu_pod(cluster, "waiting", 8)["spec"]


def test_cordon_node_selector_and_taints_are_honoured() -> None:
    cluster = make_cluster((8, 8, 8, 8))
    cluster.store.patch("nodes", "gpu-0", {"spec": {"unschedulable": True}})
    cluster.store.patch(
        "nodes",
        "gpu-1",
        {"spec": {"taints": [{"key": "nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]}},
    )
    cluster.store.patch("nodes", "gpu-2", {"metadata": {"labels": {"pool": "a100"}}})
    pod = gpu_pod(cluster, "p", 1, nodeSelector={"pool": "h100"})
    assert pod["spec"]["nodeName"] == "gpu-3"
    gpu_pod(cluster, "q", 8, nodeSelector={"pool": "h100"})  # gpu-3 has only 7 left
    (message,) = failed_scheduling(cluster, "q")
    assert message.startswith(
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {nvidia.com/xid: 79}, 1 node(s) were unschedulable."
    )
    tolerant = gpu_pod(
        cluster,
        "r",
        8,
        tolerations=[{"key": "nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}],
    )
    assert tolerant["spec"]["nodeName"] == "gpu-1"


def test_not_ready_node_is_tainted_and_avoided() -> None:
    cluster = make_cluster((8, 8))
    cluster.set_node_ready("gpu-0", False)
    taints = cluster.store.get("nodes", "gpu-0")["spec"]["taints"]
    assert [(t["key"], t["effect"]) for t in taints] == [
        ("node.kubernetes.io/not-ready", "NoSchedule")
    ]
    assert gpu_pod(cluster, "a", 8)["spec"]["nodeName"] == "gpu-1"
    cluster.set_node_ready("gpu-0", True)
    assert "taints" not in cluster.store.get("nodes", "gpu-0")["spec"]
