"""A written kubeconfig loads in the official client, with and without a bearer token.

kubectl never sends a bearer token over plain HTTP (kubernetes/kubectl#744), so a
token-protected fleetsim serves the Python client; kubectl needs a server without one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from fleetsim.kube.cluster import Cluster
from fleetsim.kube.server import KubeServer
from fleetsim.kubeconfig import write_kubeconfig

from .conftest import NS


def test_kubeconfig_without_a_token_reaches_the_server(server: KubeServer, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", server.url, namespace=NS)
    assert path.stat().st_mode & 0o777 == 0o600
    doc = yaml.safe_load(path.read_text())
    assert doc["contexts"][0]["context"]["namespace"] == NS
    api = config.new_client_from_config(config_file=str(path))
    names = [n.metadata.name for n in client.CoreV1Api(api).list_node().items]
    assert names == ["gpu-0", "gpu-1", "gpu-2"]


def test_token_kubeconfig_is_accepted_and_a_wrong_token_is_401(
    cluster: Cluster, tmp_path: Path
) -> None:
    with KubeServer(cluster, token="t0ken") as server:
        good = write_kubeconfig(tmp_path / "good", server.url, token="t0ken")
        bad = write_kubeconfig(tmp_path / "bad", server.url, token="wrong")
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(good)))
        assert len(core.list_node().items) == 3
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(config.new_client_from_config(config_file=str(bad))).list_node()
    assert err.value.status == 401
