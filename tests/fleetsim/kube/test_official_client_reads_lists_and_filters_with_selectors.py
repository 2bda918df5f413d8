"""The official client gets and lists objects, filtering by label and field selectors."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fleetsim.kube.cluster import Cluster

from .conftest import NS


@pytest.fixture
def labelled_pods(cluster: Cluster) -> None:
    for name, labels, node in [
        ("a", {"app": "llm", "tier": "gold", "serving": "true"}, "gpu-0"),
        ("b", {"app": "llm", "tier": "silver"}, "gpu-1"),
        # No node has this name, so c stays Pending.
        ("c", {"app": "embed", "tier": "bronze"}, "gpu-9"),
    ]:
        spec = {
            "containers": [{"name": "c", "image": "img"}],
            "nodeSelector": {"kubernetes.io/hostname": node},
        }
        cluster.store.create(
            "pods", {"metadata": {"name": name, "labels": labels}, "spec": spec}, namespace=NS
        )


def names(pods: client.V1PodList) -> list[str]:
    return sorted(p.metadata.name for p in pods.items)


@pytest.mark.usefixtures("labelled_pods")
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=llm", ["a", "b"]),
        ("app==llm,tier!=gold", ["b"]),
        ("tier in (gold, bronze)", ["a", "c"]),
        ("tier notin (gold)", ["b", "c"]),
        ("serving", ["a"]),
        ("!serving", ["b", "c"]),
        ("app=llm,serving,tier in (gold)", ["a"]),
    ],
)
def test_label_selectors_filter_lists(
    api: client.ApiClient, selector: str, expected: list[str]
) -> None:
    core = client.CoreV1Api(api)
    assert names(core.list_namespaced_pod(NS, label_selector=selector)) == expected


@pytest.mark.usefixtures("labelled_pods")
def test_field_selectors_filter_by_name_node_and_phase(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    assert names(core.list_namespaced_pod(NS, field_selector="metadata.name=b")) == ["b"]
    on_gpu0 = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-0")
    assert [p.metadata.name for p in on_gpu0.items] == ["a"]
    running = names(core.list_namespaced_pod(NS, field_selector="status.phase=Running"))
    assert running == ["a", "b"]
    assert names(core.list_namespaced_pod(NS, field_selector="status.phase!=Running")) == ["c"]
    both = core.list_namespaced_pod(NS, field_selector="spec.nodeName=gpu-1,status.phase=Running")
    assert names(both) == ["b"]


@pytest.mark.usefixtures("labelled_pods")
def test_unsupported_field_selector_is_a_bad_request(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).list_namespaced_pod(NS, field_selector="spec.hostname=x")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == "field label not supported: spec.hostname"


@pytest.mark.usefixtures("labelled_pods")
def test_get_returns_the_object_and_a_missing_one_is_a_404_status(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    pod = core.read_namespaced_pod("a", NS)
    assert pod.metadata.labels["tier"] == "gold"
    assert pod.spec.node_name == "gpu-0"
    assert pod.status.pod_ip.startswith("127.")
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("nope", NS)
    assert err.value.status == 404
    status = json.loads(err.value.body)
    assert status["kind"] == "Status"
    assert status["reason"] == "NotFound"
    assert status["code"] == 404
    assert status["message"] == 'pods "nope" not found'


def test_nodes_are_cluster_scoped_and_listed_with_labels(api: client.ApiClient) -> None:
    nodes = client.CoreV1Api(api).list_node(label_selector="topology.kubernetes.io/zone=zone-0")
    assert sorted(n.metadata.name for n in nodes.items) == ["gpu-0", "gpu-2"]
    assert nodes.items[0].status.allocatable["nvidia.com/gpu"] == "8"
