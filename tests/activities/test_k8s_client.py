"""Client construction: from a kubeconfig path (with its bearer token) or a plain URL."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from activities.k8s import build_api_client
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
