"""Kubernetes client construction: from a kubeconfig path, or in-cluster.

Called from `worker/main.py` (and the drill, with fleetsim's kubeconfig) to build the one
`ApiClient` every Kubernetes-facing activity shares. The client never waits forever: a call
that names no `_request_timeout` gets `DEFAULT_TIMEOUT_S`, so an API server that accepts a
request and goes silent fails the attempt (a temporary error) instead of holding an
activity thread until the activity's own timeout, and urllib3's silent retries are off so
that every retry is a Temporal attempt the timeline can show.
"""

from __future__ import annotations

import os
from typing import Any

from kubernetes import client, config

DEFAULT_TIMEOUT_S = 10.0


class BoundedApiClient(client.ApiClient):
    """An ApiClient whose requests time out by default (the official one has no default)."""

    def __init__(
        self, configuration: client.Configuration, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        # Every retry belongs to the activity's retry policy, where it is counted and shown.
        configuration.retries = 0
        super().__init__(configuration)
        self.timeout_s = timeout_s

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = self.timeout_s
        return super().call_api(*args, **kwargs)


def build_api_client(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    host: str | None = None,
    token: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> client.ApiClient:
    """An ApiClient for `host` (plain URL, with an optional bearer `token`), `kubeconfig`,
    or the pod's service account.

    The order is explicit argument first, then `$KUBECONFIG`, then in-cluster, so a worker
    running in the cluster needs no configuration and a laptop needs only a path.
    """
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if host is not None:
        configuration.host = host
        if token is not None:
            configuration.api_key = {"authorization": token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
    elif path:
        config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
    else:
        config.load_incluster_config(client_configuration=configuration)
    return BoundedApiClient(configuration, timeout_s=timeout_s)
