"""Client construction: from a kubeconfig path (with its bearer token) or a plain URL."""

from __future__ import annotations

from pathlib import Path

import pytest
import urllib3
from kubernetes import client
from temporalio.exceptions import ApplicationError

from activities.errors import k8s_call
from activities.k8s import BoundedApiClient, build_api_client
from fleetsim.kube.chaos import ApiFault
from fleetsim.kube.server import KubeServer
from fleetsim.kubeconfig import write_kubeconfig

from .conftest import NS, Kube


def test_a_kubeconfig_path_with_a_token_reaches_the_api_server(kube: Kube, tmp_path: Path) -> None:
    guarded = KubeServer(kube.cluster, token="s3cret").start()
    try:
        path = write_kubeconfig(tmp_path / "config", guarded.url, token="s3cret", namespace=NS)
        with build_api_client(str(path)) as api:
            names = [
                n.metadata.name for n in client.CoreV1Api(api).list_namespace().items if n.metadata
            ]
        assert NS in names
        with (
            build_api_client(host=guarded.url) as anonymous,
            pytest.raises(client.ApiException) as denied,
        ):
            client.CoreV1Api(anonymous).list_namespace()
        assert denied.value.status == 401
    finally:
        guarded.stop()


def test_kubeconfig_from_the_environment_is_used_when_no_path_is_given(
    kube: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_kubeconfig(tmp_path / "config", kube.server.url)
    monkeypatch.setenv("KUBECONFIG", str(path))
    with build_api_client() as api:
        assert api.configuration.host == kube.server.url


def test_a_silent_api_server_fails_the_call_within_the_clients_own_timeout(kube: Kube) -> None:
    # The official client has no default timeout: without one this read would never return.
    kube.server.chaos.open(ApiFault(answer="timeout", verbs=["list"], hang_s=30))
    with build_api_client(host=kube.server.url, timeout_s=0.5) as api:
        assert isinstance(api, BoundedApiClient)
        with pytest.raises(ApplicationError) as failed:
            k8s_call("list", "pods", lambda: client.CoreV1Api(api).list_namespaced_pod(NS))
    assert not failed.value.non_retryable
    assert failed.value.message.startswith("kubernetes list pods: ReadTimeoutError: ")


def test_a_call_naming_its_own_timeout_keeps_it_and_urllib3_never_retries_behind_our_back(
    kube: Kube,
) -> None:
    kube.server.chaos.open(ApiFault(answer="timeout", verbs=["get"], hang_s=30))
    with build_api_client(host=kube.server.url, timeout_s=60) as api:
        assert api.configuration.retries == 0
        with pytest.raises(urllib3.exceptions.MaxRetryError, match="Read timed out"):
            client.CoreV1Api(api).read_namespace(NS, _request_timeout=0.3)
    # One request, not urllib3's default of up to four.
    assert sum(w["answered"] for w in kube.server.chaos.describe()) == 1
