"""Bad requests get the Status body and code a real API server gives; the server keeps going."""

from __future__ import annotations

import httpx
import pytest

from fleetsim.kube.cluster import Cluster
from fleetsim.kube.server import KubeServer

from .conftest import NS, deployment


@pytest.fixture
def http(server: KubeServer, cluster: Cluster) -> httpx.Client:
    cluster.store.create("deployments", deployment(replicas=1), namespace=NS)
    return httpx.Client(base_url=server.url, timeout=5)


def status(response: httpx.Response, code: int, reason: str) -> str:
    body = response.json()
    assert (response.status_code, body["kind"], body["code"], body["reason"]) == (
        code,
        "Status",
        code,
        reason,
    )
    return str(body["message"])


def test_unknown_resource_and_group_are_404(http: httpx.Client) -> None:
    message = status(http.get(f"/api/v1/namespaces/{NS}/widgets"), 404, "NotFound")
    assert message == "the server could not find the requested resource"
    status(http.get("/apis/example.com/v1/things"), 404, "NotFound")
    status(http.get(f"/api/v1/namespaces/{NS}/pods/x/log"), 404, "NotFound")


def test_invalid_json_body_is_400(http: httpx.Client) -> None:
    response = http.post(
        f"/api/v1/namespaces/{NS}/pods",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    status(response, 400, "BadRequest")


def test_patch_with_a_malformed_body_or_unknown_type_is_rejected(http: httpx.Client) -> None:
    url = f"/apis/apps/v1/namespaces/{NS}/deployments/llm"
    status(
        http.patch(url, content=b"[1, 2", headers={"content-type": "application/merge-patch+json"}),
        400,
        "BadRequest",
    )
    status(
        http.patch(url, content=b'{"spec": {}}', headers={"content-type": "text/plain"}),
        415,
        "UnsupportedMediaType",
    )
    status(
        http.patch(
            url, content=b'{"op": "add"}', headers={"content-type": "application/json-patch+json"}
        ),
        400,
        "BadRequest",
    )
    message = status(
        http.patch(
            url,
            content=b'{"spec": {"replicas": -2}}',
            headers={"content-type": "application/merge-patch+json"},
        ),
        422,
        "Invalid",
    )
    assert "spec.replicas" in message


def test_bad_label_selector_is_400(http: httpx.Client) -> None:
    response = http.get(f"/api/v1/namespaces/{NS}/pods", params={"labelSelector": "app in"})
    status(response, 400, "BadRequest")


def test_wrong_method_is_405(http: httpx.Client) -> None:
    status(http.put(f"/api/v1/namespaces/{NS}/pods", json={}), 405, "MethodNotAllowed")


def test_renaming_through_an_update_is_400(http: httpx.Client, cluster: Cluster) -> None:
    dep = cluster.store.get("deployments", "llm", namespace=NS)
    dep["metadata"]["name"] = "other"
    status(http.put(f"/apis/apps/v1/namespaces/{NS}/deployments/llm", json=dep), 400, "BadRequest")


def test_server_still_answers_after_bad_requests(http: httpx.Client) -> None:
    for _ in range(3):
        http.post(
            f"/api/v1/namespaces/{NS}/pods",
            content=b"\xff\xfe",
            headers={"content-type": "application/json"},
        )
        http.patch(
            f"/api/v1/namespaces/{NS}/pods/none",
            content=b"null",
            headers={"content-type": "application/strategic-merge-patch+json"},
        )
    response = http.get(f"/apis/apps/v1/namespaces/{NS}/deployments/llm")
    assert response.status_code == 200
    assert response.json()["metadata"]["name"] == "llm"
