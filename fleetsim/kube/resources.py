"""The resource types fleetsim serves: names, group/version, scope and behaviour flags.

Called from the store (to resolve "pods", "Pod" or "deployments.apps" to one type),
from discovery (to list what `/api` and `/apis` advertise) and from the server (to
route a URL to a type). Adding a resource here makes it storable, listable and
discoverable; controllers decide whether anything reacts to it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group: str  # "" for the core group
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ("status",)
    # Only pods wait out a grace period on delete; everything else goes at once.
    graceful_delete: bool = False
    # Custom resources do not accept strategic merge patch on a real API server.
    custom: bool = False
    # Field selectors the real API server accepts for this type, besides
    # metadata.name and metadata.namespace.
    field_labels: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Unique name: plural for the core group, plural.group otherwise."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def verbs(self) -> list[str]:
        return ["create", "delete", "get", "list", "patch", "update", "watch"]


_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)

RESOURCES: tuple[Resource, ...] = (
    Resource("namespaces", "Namespace", "", "v1", False, ("ns",), ("status", "finalize")),
    Resource("nodes", "Node", "", "v1", False, ("no",), field_labels=("spec.unschedulable",)),
    Resource(
        "pods",
        "Pod",
        "",
        "v1",
        True,
        ("po",),
        ("status", "eviction"),
        graceful_delete=True,
        field_labels=(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
    ),
    Resource("services", "Service", "", "v1", True, ("svc",)),
    Resource("events", "Event", "", "v1", True, ("ev",), (), field_labels=_EVENT_FIELDS),
    Resource("endpointslices", "EndpointSlice", "discovery.k8s.io", "v1", True, (), ()),
    Resource("deployments", "Deployment", "apps", "v1", True, ("deploy",), ("status", "scale")),
    Resource("replicasets", "ReplicaSet", "apps", "v1", True, ("rs",), ("status", "scale")),
    Resource(
        "leaderworkersets",
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io",
        "v1",
        True,
        ("lws",),
        ("status", "scale"),
        custom=True,
    ),
)


class UnknownResource(LookupError):
    pass


def resolve(name: str) -> Resource:
    """Find a resource by plural, plural.group, kind, singular or short name."""
    lowered = name.lower()
    for r in RESOURCES:
        if lowered in (r.key, r.plural, r.singular, r.kind.lower()) or lowered in r.short_names:
            return r
    raise UnknownResource(name)


def lookup(group: str, version: str, plural: str) -> Resource | None:
    """The resource served at /api(s)/{group}/{version}/.../{plural}, if any."""
    for r in RESOURCES:
        if r.group == group and r.version == version and r.plural == plural:
            return r
    return None


def groups() -> dict[str, list[Resource]]:
    """Resources by API group, in the order discovery should list them."""
    out: dict[str, list[Resource]] = {}
    for r in RESOURCES:
        out.setdefault(r.group, []).append(r)
    return out
