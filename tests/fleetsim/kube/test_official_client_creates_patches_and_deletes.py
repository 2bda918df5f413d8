"""The official client creates, patches (merge, strategic, JSON), scales and deletes."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fleetsim.kube.cluster import Cluster

from .conftest import NS, deployment, llm_template, pod_names


def status_of(err: pytest.ExceptionInfo[ApiException]) -> dict[str, object]:
    body = json.loads(err.value.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == err.value.status
    return body


def make_pod(core: client.CoreV1Api, name: str = "p0") -> client.V1Pod:
    body = {
        "metadata": {"name": name, "labels": {"app": "x", "serving": "true"}},
        **{"spec": llm_template(1)["spec"]},
    }
    return core.create_namespaced_pod(NS, body)


def test_create_stamps_metadata_and_a_duplicate_is_already_exists(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    pod = make_pod(core)
    assert pod.metadata.uid and pod.metadata.resource_version and pod.metadata.creation_timestamp
    assert pod.spec.scheduler_name == "default-scheduler"
    with pytest.raises(ApiException) as err:
        make_pod(core)
    assert err.value.status == 409
    assert status_of(err)["reason"] == "AlreadyExists"


def test_create_in_a_missing_namespace_is_not_found(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).create_namespaced_pod(
            "nowhere", {"metadata": {"name": "p"}, "spec": llm_template()["spec"]}
        )
    assert err.value.status == 404
    assert status_of(err)["message"] == 'namespaces "nowhere" not found'


def test_invalid_object_is_422_with_the_bad_fields(api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    bad = deployment("bad")
    bad["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_deployment(NS, bad)
    assert err.value.status == 422
    body = status_of(err)
    assert body["reason"] == "Invalid"
    assert "selector` does not match template `labels`" in str(body["message"])
    causes = body["details"]["causes"]  # type: ignore[index]
    assert causes[0]["field"] == "spec.template.metadata.labels"


def test_merge_patch_sets_and_null_deletes_labels(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    make_pod(core)
    patched = core.patch_namespaced_pod(
        "p0",
        NS,
        {"metadata": {"labels": {"serving": None, "drained": "yes"}}},
        _content_type="application/merge-patch+json",
    )
    assert patched.metadata.labels == {"app": "x", "drained": "yes"}


def test_strategic_merge_patch_cordons_and_sets_taints_atomically(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.patch_node("gpu-0", {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}})
    node = core.patch_node(
        "gpu-0",
        {
            "spec": {"unschedulable": True, "taints": [{"key": "b", "effect": "NoSchedule"}]},
            "metadata": {"labels": {"fleetmend/quarantine": "xid-79"}},
        },
    )
    assert node.spec.unschedulable is True
    # NodeSpec.taints has no patch strategy on a real server: the list is replaced.
    assert [t.key for t in node.spec.taints] == ["b"]
    assert node.metadata.labels["fleetmend/quarantine"] == "xid-79"
    assert node.metadata.labels["pool"] == "h100"


def test_strategic_merge_patch_merges_status_conditions_by_type(
    api: client.ApiClient, cluster: Cluster
) -> None:
    core = client.CoreV1Api(api)
    make_pod(core)
    before = {c.type for c in core.read_namespaced_pod("p0", NS).status.conditions}
    patched = core.patch_namespaced_pod_status(
        "p0", NS, {"status": {"conditions": [{"type": "example.com/drained", "status": "True"}]}}
    )
    after = {c.type: c.status for c in patched.status.conditions}
    assert before < set(after)
    assert after["example.com/drained"] == "True"


def test_strategic_merge_patch_scales_deployment_replicas(
    api: client.ApiClient, cluster: Cluster
) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(NS, deployment(replicas=1))
    apps.patch_namespaced_deployment("llm", NS, {"spec": {"replicas": 3}})
    assert len(pod_names(cluster, "app=llm")) == 3


def test_json_patch_adds_and_removes_and_a_failed_test_is_422(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    make_pod(core)
    patched = core.patch_namespaced_pod(
        "p0",
        NS,
        [
            {"op": "add", "path": "/metadata/annotations", "value": {"fleetmend/op": "abc"}},
            {"op": "remove", "path": "/metadata/labels/serving"},
        ],
    )
    assert patched.metadata.annotations == {"fleetmend/op": "abc"}
    assert "serving" not in patched.metadata.labels
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p0", NS, [{"op": "remove", "path": "/metadata/labels/absent"}])
    assert err.value.status == 422
    assert status_of(err)["reason"] == "Invalid"


def test_stale_resource_version_is_a_409_conflict(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    pod = make_pod(core)
    stale = pod.metadata.resource_version
    core.patch_namespaced_pod("p0", NS, {"metadata": {"labels": {"x": "1"}}})
    pod.metadata.labels["y"] = "2"
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_pod("p0", NS, pod)
    assert err.value.status == 409
    assert status_of(err)["reason"] == "Conflict"
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod(
            "p0", NS, {"metadata": {"resourceVersion": stale, "labels": {"z": "3"}}}
        )
    assert err.value.status == 409
    fresh = core.read_namespaced_pod("p0", NS)
    fresh.metadata.labels["y"] = "2"
    assert core.replace_namespaced_pod("p0", NS, fresh).metadata.labels["y"] == "2"


def test_no_op_patch_keeps_the_resource_version(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    make_pod(core)
    pod = core.read_namespaced_pod("p0", NS)  # after the scheduler bound it
    same = core.patch_namespaced_pod("p0", NS, {"metadata": {"labels": {"app": "x"}}})
    assert same.metadata.resource_version == pod.metadata.resource_version


def test_scale_subresource_reads_and_changes_replicas(
    api: client.ApiClient, cluster: Cluster
) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(NS, deployment(replicas=2))
    scale = apps.read_namespaced_deployment_scale("llm", NS)
    assert scale.spec.replicas == 2
    assert scale.status.selector == "app=llm"
    apps.patch_namespaced_deployment_scale("llm", NS, {"spec": {"replicas": 4}})
    assert apps.read_namespaced_deployment("llm", NS).spec.replicas == 4
    assert len(pod_names(cluster, "app=llm")) == 4
    scale = apps.read_namespaced_deployment_scale("llm", NS)
    scale.spec.replicas = 1
    apps.replace_namespaced_deployment_scale("llm", NS, scale)
    live = [
        p
        for p in cluster.store.list("pods", namespace=NS, label_selector="app=llm")
        if not p["metadata"].get("deletionTimestamp")
    ]
    assert len(live) == 1
    scale.spec.replicas = 3  # scale's resourceVersion is now stale
    with pytest.raises(ApiException) as err:
        apps.replace_namespaced_deployment_scale("llm", NS, scale)
    assert err.value.status == 409


def test_delete_waits_out_the_grace_period_and_force_does_not(
    api: client.ApiClient, cluster: Cluster, advance: Callable[[float], None]
) -> None:
    core = client.CoreV1Api(api)
    make_pod(core, "graceful")
    make_pod(core, "forced")
    gone = core.delete_namespaced_pod("graceful", NS, grace_period_seconds=20)
    assert gone.metadata.deletion_timestamp is not None
    assert core.read_namespaced_pod("graceful", NS).metadata.deletion_grace_period_seconds == 20
    core.delete_namespaced_pod(
        "forced", NS, grace_period_seconds=0, body=client.V1DeleteOptions(grace_period_seconds=0)
    )
    assert pod_names(cluster) == ["graceful"]
    advance(19)
    assert pod_names(cluster) == ["graceful"]
    advance(1)
    assert pod_names(cluster) == []


def test_deleting_a_deployment_collects_its_replicaset_and_pods(
    api: client.ApiClient, cluster: Cluster, advance: Callable[[float], None]
) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(NS, deployment(replicas=2))
    status = apps.delete_namespaced_deployment("llm", NS)
    assert status["status"] == "Success"
    assert cluster.store.list("replicasets", namespace=NS) == []
    advance(30)
    assert pod_names(cluster) == []


def test_leaderworkerset_accepts_merge_patch_but_not_strategic(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "big"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": llm_template(8)},
        },
    }
    custom.create_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets", lws
    )
    patched = custom.patch_namespaced_custom_object(
        "leaderworkerset.x-k8s.io",
        "v1",
        NS,
        "leaderworkersets",
        "big",
        {"metadata": {"annotations": {"fleetmend/op": "1"}}},
    )
    assert patched["metadata"]["annotations"] == {"fleetmend/op": "1"}
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            "leaderworkerset.x-k8s.io",
            "v1",
            NS,
            "leaderworkersets",
            "big",
            {"spec": {"replicas": 2}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415


def test_leaderworkerset_scale_subresource_adds_and_removes_groups(
    api: client.ApiClient, cluster: Cluster
) -> None:
    custom = client.CustomObjectsApi(api)
    group = ("leaderworkerset.x-k8s.io", "v1", NS, "leaderworkersets")
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "big"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": llm_template(1)},
        },
    }
    custom.create_namespaced_custom_object(*group, lws)
    custom.patch_namespaced_custom_object_scale(*group, "big", {"spec": {"replicas": 2}})
    assert pod_names(cluster) == ["big-0", "big-0-1", "big-1", "big-1-1"]
    scale = custom.get_namespaced_custom_object_scale(*group, "big")
    assert scale["spec"]["replicas"] == 2
    assert scale["status"]["selector"] == (
        "leaderworkerset.sigs.k8s.io/name=big,leaderworkerset.sigs.k8s.io/worker-index=0"
    )
    custom.patch_namespaced_custom_object_scale(*group, "big", {"spec": {"replicas": 1}})
    doomed = [
        p["metadata"]["name"]
        for p in cluster.store.list("pods", namespace=NS)
        if p["metadata"].get("deletionTimestamp")
    ]
    assert sorted(doomed) == ["big-1", "big-1-1"]


def test_eviction_deletes_the_pod_gracefully(api: client.ApiClient, cluster: Cluster) -> None:
    core = client.CoreV1Api(api)
    make_pod(core, "evictee")
    core.create_namespaced_pod_eviction(
        "evictee",
        NS,
        {
            "metadata": {"name": "evictee", "namespace": NS},
            "deleteOptions": {"gracePeriodSeconds": 5},
        },
    )
    pod = core.read_namespaced_pod("evictee", NS)
    assert pod.metadata.deletion_timestamp is not None
    assert pod.metadata.deletion_grace_period_seconds == 5


def test_server_side_dry_run_validates_but_changes_nothing(
    api: client.ApiClient, cluster: Cluster
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    apps.create_namespaced_deployment(NS, deployment(replicas=1))
    version = cluster.store.resource_version
    would = core.create_namespaced_pod(
        NS, {"metadata": {"name": "ghost"}, "spec": llm_template(1)["spec"]}, dry_run="All"
    )
    assert would.metadata.uid and would.spec.scheduler_name == "default-scheduler"
    apps.patch_namespaced_deployment_scale("llm", NS, {"spec": {"replicas": 5}}, dry_run="All")
    (pod,) = pod_names(cluster)
    core.delete_namespaced_pod(pod, NS, dry_run="All")
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_deployment("llm", NS, {"spec": {"replicas": -1}}, dry_run="All")
    assert err.value.status == 422
    assert cluster.store.resource_version == version
    assert pod_names(cluster) == [pod]
