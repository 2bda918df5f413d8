"""Kubernetes client construction: from a kubeconfig path, or in-cluster.

Called from `worker/main.py` (and the drill, with fleetsim's kubeconfig) to build the one
`ApiClient` every Kubernetes-facing activity shares.
"""

from __future__ import annotations

import os

from kubernetes import client, config


def build_api_client(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    host: str | None = None,
    token: str | None = None,
) -> client.ApiClient:
    """An ApiClient for `host` (plain URL, with an optional bearer `token`), `kubeconfig`,
    or the pod's service account.

    The order is explicit argument first, then `$KUBECONFIG`, then in-cluster, so a worker
    running in the cluster needs no configuration and a laptop needs only a path.
    """
    if host is not None:
        configuration = client.Configuration()
        configuration.host = host
        if token is not None:
            configuration.api_key = {"authorization": token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
        return client.ApiClient(configuration)
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)
