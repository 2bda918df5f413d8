"""The worker's Kubernetes identity can do nothing outside deploy/rbac.yaml.

fleetsim's API server enforces the file's ClusterRole through its binding for the worker's
ServiceAccount token: every (resource, subresource, verb) fleetsim serves is tried over
HTTP, and the answer is a 403 Status exactly when the file does not grant it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError

from activities.errors import k8s_call
from activities.k8s import build_api_client
from fleetsim.clock import ManualClock
from fleetsim.kube.cluster import Cluster
from fleetsim.kube.rbac import Authorizer
from fleetsim.kube.resources import RESOURCES
from fleetsim.kube.server import KubeServer

from .conftest import NS, RBAC_PATH, rbac_rules, worker_user

VERBS = {
    "get": ("GET", True, ""),
    "list": ("GET", False, ""),
    "watch": ("GET", False, "?watch=true&timeoutSeconds=1"),
    "create": ("POST", False, ""),
    "update": ("PUT", True, ""),
    "patch": ("PATCH", True, ""),
    "delete": ("DELETE", True, ""),
    "deletecollection": ("DELETE", False, ""),
}


@dataclass
class Enforcing:
    server: KubeServer
    token: str
    authorizer: Authorizer


@pytest.fixture
def enforcing() -> Iterator[Enforcing]:
    cluster = Cluster(clock=ManualClock(), ready_on_schedule=True)
    cluster.add_namespace(NS)
    token = secrets.token_urlsafe(16)
    authorizer = Authorizer.from_file(RBAC_PATH, {token: worker_user()})
    server = KubeServer(cluster, authorizer=authorizer).start()
    try:
        yield Enforcing(server, token, authorizer)
    finally:
        server.stop()


def every_request() -> Iterator[tuple[str, str, str, str, str]]:
    """(group, resource[/sub], verb, method, path) for everything fleetsim serves."""
    for res in RESOURCES:
        base = f"/api/{res.version}" if not res.group else f"/apis/{res.group}/{res.version}"
        scope = f"{base}/namespaces/{NS}" if res.namespaced else base
        for verb, (method, named, query) in VERBS.items():
            path = f"{scope}/{res.plural}" + ("/x" if named else "")
            yield res.group, res.plural, verb, method, path + query
        for sub in res.subresources:
            for verb in ("get", "update", "patch"):
                method, _, _ = VERBS[verb]
                yield (
                    res.group,
                    f"{res.plural}/{sub}",
                    verb,
                    method,
                    f"{scope}/{res.plural}/x/{sub}",
                )
    yield "", "pods/eviction", "create", "POST", f"/api/v1/namespaces/{NS}/pods/x/eviction"


def test_exactly_what_the_file_grants_gets_past_authorization(enforcing: Enforcing) -> None:
    granted = rbac_rules()
    refused, allowed = set(), set()
    headers = {"Authorization": f"Bearer {enforcing.token}", "Content-Type": "application/json"}
    with httpx.Client(base_url=enforcing.server.url, headers=headers, timeout=10) as http:
        for group, resource, verb, method, path in every_request():
            body = b"{}" if method in ("POST", "PUT", "PATCH") else None
            headers_ = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
            with http.stream(method, path, content=body, headers=headers_) as resp:
                status = resp.status_code
                if status == 403:
                    resp.read()
                    assert resp.json()["reason"] == "Forbidden"
                    assert f'User "{worker_user()}" cannot {verb}' in resp.json()["message"]
            (refused if status == 403 else allowed).add((group, resource, verb))
    assert allowed == {p for p in allowed | refused if p in granted}
    assert allowed, "nothing was allowed: the token was not recognised"
    assert refused and not (refused & granted)


def test_an_unknown_token_is_401_and_discovery_is_open_to_the_worker(enforcing: Enforcing) -> None:
    url = enforcing.server.url
    assert (
        httpx.get(f"{url}/api/v1/nodes", headers={"Authorization": "Bearer guess"}).status_code
        == 401
    )
    assert httpx.get(f"{url}/api/v1/nodes").status_code == 401
    ok = {"Authorization": f"Bearer {enforcing.token}"}
    assert httpx.get(f"{url}/apis", headers=ok).status_code == 200
    assert httpx.get(f"{url}/version", headers=ok).status_code == 200


def test_a_call_outside_the_file_is_a_non_retryable_error_naming_the_object_and_verb(
    enforcing: Enforcing,
) -> None:
    api = build_api_client(host=enforcing.server.url, token=enforcing.token)
    core = client.CoreV1Api(api)
    try:
        assert core.list_pod_for_all_namespaces().items == []  # granted
        with pytest.raises(ApplicationError) as caught:
            k8s_call(
                "delete",
                f"namespace {NS}",
                lambda: core.delete_namespace(NS),
            )
        with pytest.raises(ApiException) as raw:
            core.delete_namespaced_service("llm", NS)
    finally:
        api.close()
    assert caught.value.non_retryable
    assert "delete" in caught.value.message and f"namespace {NS}" in caught.value.message
    assert raw.value.status == 403
    assert [(r.verb, r.resource) for r in enforcing.authorizer.denied] == [
        ("delete", "namespaces"),
        ("delete", "services"),
    ]
