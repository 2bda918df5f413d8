"""Write a kubeconfig that points kubectl or the official client at a fleetsim API server.

Called from tests, drills and `python -m fleetsim serve` after the server starts:
`write_kubeconfig(path, server.url, token=...)`, then `kubectl --kubeconfig path ...`
or `kubernetes.config.load_kube_config(path)`. The server speaks plain HTTP on
loopback, so there is no CA; the token is sent as a bearer token when given.
kubectl never sends a bearer token over plain HTTP (kubernetes/kubectl#744): serve
without a token when kubectl must reach the server; the Python client sends it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def kubeconfig(
    server_url: str,
    *,
    token: str | None = None,
    cluster: str = "fleetsim",
    namespace: str | None = None,
) -> dict[str, Any]:
    user: dict[str, Any] = {"token": token} if token else {}
    context: dict[str, Any] = {"cluster": cluster, "user": f"{cluster}-user"}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server_url}}],
        "users": [{"name": f"{cluster}-user", "user": user}],
        "contexts": [{"name": cluster, "context": context}],
        "current-context": cluster,
        "preferences": {},
    }


def write_kubeconfig(
    path: str | Path,
    server_url: str,
    *,
    token: str | None = None,
    cluster: str = "fleetsim",
    namespace: str | None = None,
) -> Path:
    """Write the kubeconfig (mode 0600, as kubectl expects for credentials)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(
        kubeconfig(server_url, token=token, cluster=cluster, namespace=namespace), sort_keys=False
    )
    target.write_text(text)
    target.chmod(0o600)
    return target
