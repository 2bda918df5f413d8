"""Least privilege: deploy/rbac.yaml grants exactly the Kubernetes calls in activities/.

Two sides are compared. Statically, every client call in the activities' source is mapped
to the (apiGroup, resource, verb) it needs; the manifest must grant that set and nothing
else. Dynamically, the `kube` and `fleet_factory` fixtures record every request the tests
make and fail if the manifest does not grant one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import RBAC_PATH, rbac_rules, request_permission

ACTIVITIES = Path(__file__).resolve().parents[2] / "activities"
CALL = re.compile(r"\.(core|apps|discovery|custom)\.(\w+)")
GROUPS = {"core": "", "apps": "apps", "discovery": "discovery.k8s.io"}
VERBS = {
    "read": "get",
    "get": "get",
    "list": "list",
    "patch": "patch",
    "create": "create",
    "delete": "delete",
    "replace": "update",
}
# The one custom resource the activities touch.
CUSTOM = ("leaderworkerset.x-k8s.io", "leaderworkersets")


def permission_of(api: str, method: str) -> tuple[str, str, str]:
    """`CoreV1Api.read_namespaced_pod` -> ("", "pods", "get"), and so on."""
    verb_word, _, rest = method.partition("_")
    verb = VERBS[verb_word]
    rest = rest.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
    sub = ""
    if rest.endswith("_scale"):
        rest, sub = rest.removesuffix("_scale"), "/scale"
    if api == "custom":
        assert rest == "custom_object", method
        group, resource = CUSTOM
        return group, resource + sub, verb
    resource = rest.replace("_", "")
    plural = resource if resource.endswith("s") else resource + "s"
    return GROUPS[api], plural + sub, verb


def used_by_source() -> dict[tuple[str, str, str], set[str]]:
    used: dict[tuple[str, str, str], set[str]] = {}
    for path in sorted(ACTIVITIES.glob("*.py")):
        for api, method in CALL.findall(path.read_text()):
            if method.startswith("api_client"):
                continue
            used.setdefault(permission_of(api, method), set()).add(f"{path.name}:{method}")
    return used


@pytest.mark.parametrize(
    ("api", "method", "expected"),
    [
        ("core", "read_namespaced_pod", ("", "pods", "get")),
        ("core", "list_pod_for_all_namespaces", ("", "pods", "list")),
        ("core", "patch_node", ("", "nodes", "patch")),
        (
            "discovery",
            "list_namespaced_endpoint_slice",
            ("discovery.k8s.io", "endpointslices", "list"),
        ),
        ("apps", "patch_namespaced_deployment_scale", ("apps", "deployments/scale", "patch")),
        ("apps", "list_namespaced_replica_set", ("apps", "replicasets", "list")),
        (
            "custom",
            "patch_namespaced_custom_object_scale",
            ("leaderworkerset.x-k8s.io", "leaderworkersets/scale", "patch"),
        ),
    ],
)
def test_client_methods_map_to_the_permission_they_need(
    api: str, method: str, expected: tuple[str, str, str]
) -> None:
    assert permission_of(api, method) == expected


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/serving/pods/llm-0", "", ("", "pods", "get")),
        ("GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3Dn", ("", "pods", "list")),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/serving/deployments/llm/scale",
            "",
            ("apps", "deployments/scale", "patch"),
        ),
        ("DELETE", "/api/v1/namespaces/serving/pods/llm-0", "", ("", "pods", "delete")),
        ("GET", "/api/v1/nodes", "watch=true", ("", "nodes", "watch")),
    ],
)
def test_recorded_requests_map_to_the_permission_they_need(
    method: str, path: str, query: str, expected: tuple[str, str, str]
) -> None:
    assert request_permission(method, path, query) == expected


def test_rbac_grants_exactly_what_the_activities_call() -> None:
    used = used_by_source()
    granted = rbac_rules()
    missing = {p: sorted(where) for p, where in used.items() if p not in granted}
    unused = granted - set(used)
    assert not missing, f"{RBAC_PATH.name} lacks: {missing}"
    assert not unused, f"{RBAC_PATH.name} grants what no activity calls: {sorted(unused)}"
    assert ("", "pods", "delete") in used  # force delete and relocation
    assert ("", "secrets", "get") not in granted
