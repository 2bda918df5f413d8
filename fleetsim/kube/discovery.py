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


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_v3_root() -> dict[str, Any]:
    """`/openapi/v3`: where each group-version's document lives.

    kubectl reads it to learn that the server validates fields itself
    (`fieldValidation` on PATCH), which lets `kubectl apply` and `create -f` run with
    their default validation instead of demanding a full client-side schema.
    """
    paths = {}
    for group, resources in groups().items():
        gv = _gv_path(group, resources[0].version)
        paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash=fleetsim"}
    return {"paths": paths}


def openapi_v3_group_version(group: str, version: str) -> dict[str, Any] | None:
    """The group-version's OpenAPI document, reduced to what kubectl consults: the
    per-object PATCH operations, their GVK extension and the fieldValidation parameter."""
    resources = [r for r in groups().get(group, []) if r.version == version]
    if not resources:
        return None
    prefix = "/" + _gv_path(group, version)
    paths: dict[str, Any] = {}
    params = [
        {"name": name, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
        for name in ("dryRun", "fieldManager", "fieldValidation", "force")
    ]
    for r in resources:
        scope = f"{prefix}/namespaces/{{namespace}}" if r.namespaced else prefix
        gvk = {"group": group, "version": version, "kind": r.kind}
        paths[f"{scope}/{r.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{r.kind}",
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "fleetsim", "version": "v1.32.0-fleetsim"},
        "paths": paths,
        "components": {"schemas": {}},
    }
