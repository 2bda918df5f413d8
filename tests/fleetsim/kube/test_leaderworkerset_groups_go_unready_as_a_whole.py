"""LeaderWorkerSet groups: leader + workers, labelled by group, ready only as a whole."""

from __future__ import annotations

from typing import Any

from fleetsim.kube.cluster import Cluster
from fleetsim.kube.controllers.leaderworkersets import GROUP_INDEX_LABEL, WORKER_INDEX_LABEL
from fleetsim.kube.pods import is_ready

from .conftest import NS, llm_template, make_cluster, service


def lws(replicas: int = 2, size: int = 2, restart_policy: str | None = None) -> dict[str, Any]:
    lwt: dict[str, Any] = {
        "size": size,
        "workerTemplate": llm_template(8, {"app": "big", "serving": "true"}),
    }
    if restart_policy:
        lwt["restartPolicy"] = restart_policy
    return {
        "metadata": {"name": "big"},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt},
    }


def group(cluster: Cluster, index: int) -> dict[str, dict[str, Any]]:
    return {
        p["metadata"]["name"]: p
        for p in cluster.store.list(
            "pods", namespace=NS, label_selector=f"{GROUP_INDEX_LABEL}={index}"
        )
    }


def all_ready(cluster: Cluster) -> None:
    for p in cluster.store.list("pods", namespace=NS):
        cluster.set_pod_ready(NS, p["metadata"]["name"], True)


def test_groups_are_named_and_labelled_like_the_real_controller() -> None:
    cluster = make_cluster((8, 8, 8, 8))
    cluster.store.create("leaderworkersets", lws(), namespace=NS)
    g0 = group(cluster, 0)
    assert sorted(g0) == ["big-0", "big-0-1"]
    assert g0["big-0"]["metadata"]["labels"][WORKER_INDEX_LABEL] == "0"
    assert g0["big-0-1"]["metadata"]["labels"][WORKER_INDEX_LABEL] == "1"
    assert g0["big-0-1"]["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/leader-name"] == (
        "big-0"
    )
    assert (
        g0["big-0"]["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"]
        == (g0["big-0-1"]["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"])
    )
    assert sorted(group(cluster, 1)) == ["big-1", "big-1-1"]


def test_group_is_ready_only_when_every_rank_is() -> None:
    cluster = make_cluster((8, 8, 8, 8))
    cluster.store.create("leaderworkersets", lws(replicas=1), namespace=NS)
    cluster.set_pod_ready(NS, "big-0", True)
    assert not is_ready(cluster.store.get("pods", "big-0", namespace=NS))
    cluster.set_pod_ready(NS, "big-0-1", True)
    assert all(is_ready(p) for p in group(cluster, 0).values())
    status = cluster.store.get("leaderworkersets", "big", namespace=NS)["status"]
    assert status["readyReplicas"] == 1


def test_one_unready_rank_takes_the_whole_group_and_its_endpoint_out() -> None:
    cluster = make_cluster((8, 8, 8, 8))
    cluster.store.create(
        "services", service("big", selector={"app": "big", WORKER_INDEX_LABEL: "0"}), namespace=NS
    )
    cluster.store.create("leaderworkersets", lws(restart_policy="None"), namespace=NS)
    all_ready(cluster)
    cluster.set_pod_ready(NS, "big-1-1", False)
    assert [is_ready(p) for p in group(cluster, 1).values()] == [False, False]
    assert all(is_ready(p) for p in group(cluster, 0).values())
    (es,) = cluster.store.list("endpointslices", namespace=NS)
    ready = {e["targetRef"]["name"]: e["conditions"]["ready"] for e in es["endpoints"]}
    assert ready == {"big-0": True, "big-1": False}
    assert (
        cluster.store.get("leaderworkersets", "big", namespace=NS)["status"]["readyReplicas"] == 1
    )


def test_lost_rank_recreates_the_whole_group_by_default() -> None:
    cluster = make_cluster((8, 8, 8, 8))
    cluster.store.create("leaderworkersets", lws(), namespace=NS)
    all_ready(cluster)
    uids = {n: p["metadata"]["uid"] for n, p in group(cluster, 0).items()}
    cluster.store.delete("pods", "big-0-1", namespace=NS, grace_period_seconds=0)
    # The leader is terminating (it stays until its grace period ends) and unready.
    leader = cluster.store.get("pods", "big-0", namespace=NS)
    assert leader["metadata"]["deletionTimestamp"] and not is_ready(leader)
    cluster.finish_termination(NS, "big-0")
    fresh = group(cluster, 0)
    assert sorted(fresh) == ["big-0", "big-0-1"]
    assert all(fresh[n]["metadata"]["uid"] != uids[n] for n in fresh)
    assert not any(is_ready(p) for p in fresh.values())
    assert sorted(group(cluster, 1)) == ["big-1", "big-1-1"]  # the other group is untouched


def test_losing_the_leader_takes_its_workers_with_it() -> None:
    cluster = make_cluster((8, 8, 8, 8))
    cluster.store.create("leaderworkersets", lws(replicas=1, restart_policy="None"), namespace=NS)
    worker_uid = cluster.store.get("pods", "big-0-1", namespace=NS)["metadata"]["uid"]
    cluster.store.delete("pods", "big-0", namespace=NS, grace_period_seconds=0)
    # Workers are owned by their leader: the garbage collector takes them, and the group
    # comes back whole once the old worker is gone, not repaired around it.
    assert cluster.store.get("pods", "big-0-1", namespace=NS)["metadata"]["deletionTimestamp"]
    cluster.finish_termination(NS, "big-0-1")
    fresh = group(cluster, 0)
    assert sorted(fresh) == ["big-0", "big-0-1"]
    assert fresh["big-0-1"]["metadata"]["uid"] != worker_uid


def test_container_restart_in_a_rank_recreates_the_group() -> None:
    cluster = make_cluster((8, 8, 8, 8))
    cluster.store.create("leaderworkersets", lws(replicas=1), namespace=NS)
    all_ready(cluster)
    cluster.container_died(NS, "big-0-1", reason="OOMKilled")
    assert all(p["metadata"].get("deletionTimestamp") for p in group(cluster, 0).values())
