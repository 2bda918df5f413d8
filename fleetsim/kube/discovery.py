"""API discovery documents: what `/api`, `/apis`, `/api/v1`, `/apis/G/V` and `/version` say.

Called from the server. kubectl resolves every resource name it is given
(`pods`, `deploy`, `leaderworkerset`, `endpointslice`) through these documents
before it sends a request, so short names, singular names, verbs and subresources
must be right. kubectl 1.32 first asks for aggregated discovery
(`as=APIGroupDiscoveryList`); answering with a plain `application/json` document
makes it fall back to these legacy documents, which is all it needs.
"""

from __future__ import annotations

from typing import Any

from fleetsim.kube.resources import Resource, groups

SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
    "eviction": ["create"],
    "binding": ["create"],
    "finalize": ["update"],
}


def version() -> dict[str, Any]:
    return {
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-fleetsim",
        "gitCommit": "fleetsim",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_group_list() -> dict[str, Any]:
    out = []
    for group, resources in groups().items():
        if not group:
            continue
        gv = {"groupVersion": resources[0].api_version, "version": resources[0].version}
        out.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": out}


def _entry(r: Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs,
        "storageVersionHash": "",
    }
    if r.short_names:
        entry["shortNames"] = list(r.short_names)
    if r.plural in ("pods", "deployments", "replicasets", "services", "leaderworkersets"):
        entry["categories"] = ["all"]
    return entry


def _subresource(r: Resource, sub: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": f"{r.plural}/{sub}",
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": SUBRESOURCE_VERBS.get(sub, ["get"]),
    }
    if sub == "scale":
        entry.update(kind="Scale", group="autoscaling", version="v1")
    elif sub == "eviction":
        entry.update(kind="Eviction", group="policy", version="v1")
    elif sub == "binding":
        entry["kind"] = "Binding"
    return entry


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    resources = [r for r in groups().get(group, []) if r.version == version]
    if not resources:
        return None
    listed: list[dict[str, Any]] = []
    for r in resources:
        listed.append(_entry(r))
        listed.extend(_subresource(r, sub) for sub in r.subresources)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": resources[0].api_version,
        "resources": listed,
    }
