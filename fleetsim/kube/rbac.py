"""Kubernetes RBAC for fleetsim's API server: who may do what, from Role and binding manifests.

Used by `fleetsim.kube.server` when the fleet is built with an `Authorizer`: a bearer
token names a user (a ServiceAccount is `system:serviceaccount:NS:NAME`), and each
resource request is allowed only if a Role or ClusterRole bound to that user, or to one
of its groups, has a rule for the verb, API group, resource (or `resource/subresource`)
and name. A RoleBinding grants only inside its own namespace, even when it binds a
ClusterRole; a ClusterRoleBinding grants everywhere. This is the RBAC authorizer's
documented semantics (no aggregation, no escalation checks: fleetsim never writes RBAC).

Discovery (`/api`, `/apis`, `/version`, `/openapi/...`, health) is open to every
authenticated user, as the default `system:discovery` binding makes it on a real cluster;
any other non-resource URL needs a `nonResourceURLs` rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

RBAC_GROUP = "rbac.authorization.k8s.io"
AUTHENTICATED = "system:authenticated"
DISCOVERY_PREFIXES = ("/api", "/apis", "/version", "/openapi", "/healthz", "/readyz", "/livez")
# The worker's least-privilege manifest. `deploy/` is the operator's, not a Python package:
# it is read from the source checkout this module sits in (an editable install, tests,
# drills), never copied into the wheel where the two could drift apart.
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_RBAC = Path("deploy") / "rbac.yaml"


class RbacError(ValueError):
    """A manifest the authorizer cannot load; the message names the document and field."""


@dataclass(frozen=True)
class Rule:
    verbs: frozenset[str]
    api_groups: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    resource_names: frozenset[str] = frozenset()
    non_resource_urls: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Request:
    """The attributes the RBAC authorizer decides on (k8s.io/apiserver's `Attributes`)."""

    user: str
    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    path: str | None = None  # set for a non-resource request only
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Binding:
    namespace: str | None  # None: a ClusterRoleBinding
    role_kind: str
    role_name: str
    subjects: frozenset[str]  # user names and "group:NAME"


def serviceaccount_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def deploy_rbac_path(root: Path | None = None) -> Path:
    """`deploy/rbac.yaml` of the source checkout, or an RbacError saying where it looked."""
    path = (root or REPOSITORY_ROOT) / DEPLOY_RBAC
    if not path.is_file():
        raise RbacError(
            f"{path}: not found. fleetsim enforces the repository's {DEPLOY_RBAC}, which is "
            "not installed with the package: run from a source checkout "
            "(pip install -e .) or pass the manifest's path"
        )
    return path


def service_account_of(path: Path) -> str:
    """The user name of the one ServiceAccount a manifest like deploy/rbac.yaml creates."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as exc:
        raise RbacError(f"{path}: {exc}") from None
    accounts = [d.get("metadata") or {} for d in docs if d.get("kind") == "ServiceAccount"]
    if len(accounts) != 1:
        raise RbacError(f"{path}: expected one ServiceAccount, found {len(accounts)}")
    (meta,) = accounts
    if not meta.get("namespace") or not meta.get("name"):
        raise RbacError(f"{path}: the ServiceAccount needs metadata.name and metadata.namespace")
    return serviceaccount_user(str(meta["namespace"]), str(meta["name"]))


def user_groups(user: str) -> tuple[str, ...]:
    """The groups the API server puts a user in: every SA is in its namespace's group."""
    parts = user.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return (AUTHENTICATED, "system:serviceaccounts", f"system:serviceaccounts:{parts[2]}")
    return (AUTHENTICATED,)


def request_verb(method: str, *, named: bool, watch: bool) -> str:
    """The RBAC verb of an HTTP request on a resource, as the API server derives it."""
    if method == "GET":
        return "get" if named else ("watch" if watch else "list")
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch"}
    if method in verbs:
        return verbs[method]
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return method.lower()


def _matches_resource(rule: Rule, resource: str, subresource: str | None) -> bool:
    wanted = f"{resource}/{subresource}" if subresource else resource
    if "*" in rule.resources or wanted in rule.resources:
        return True
    return subresource is not None and f"*/{subresource}" in rule.resources


def rule_allows(rule: Rule, req: Request) -> bool:
    """Whether one PolicyRule covers the request."""
    if "*" not in rule.verbs and req.verb not in rule.verbs:
        return False
    if req.path is not None:
        return any(
            url == req.path or (url.endswith("*") and req.path.startswith(url[:-1]))
            for url in rule.non_resource_urls
        )
    if "*" not in rule.api_groups and req.api_group not in rule.api_groups:
        return False
    if not _matches_resource(rule, req.resource, req.subresource):
        return False
    # A rule restricted to names never covers a request without one (list, create).
    return not rule.resource_names or req.name in rule.resource_names


def _strings(doc: Mapping[str, Any], key: str, where: str) -> frozenset[str]:
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RbacError(f"{where}.{key}: expected a list of strings")
    return frozenset(value)


def parse_rules(doc: Mapping[str, Any], where: str) -> list[Rule]:
    rules = doc.get("rules") or []
    if not isinstance(rules, list):
        raise RbacError(f"{where}.rules: expected a list")
    out = []
    for i, raw in enumerate(rules):
        at = f"{where}.rules[{i}]"
        if not isinstance(raw, dict):
            raise RbacError(f"{at}: expected a mapping")
        rule = Rule(
            verbs=_strings(raw, "verbs", at),
            api_groups=_strings(raw, "apiGroups", at),
            resources=_strings(raw, "resources", at),
            resource_names=_strings(raw, "resourceNames", at),
            non_resource_urls=_strings(raw, "nonResourceURLs", at),
        )
        if not rule.verbs:
            raise RbacError(f"{at}.verbs: at least one verb is required")
        if not rule.resources and not rule.non_resource_urls:
            raise RbacError(f"{at}: names neither resources nor nonResourceURLs")
        out.append(rule)
    return out


def _subject(raw: Any, binding_ns: str | None, where: str) -> str:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise RbacError(f"{where}: a subject needs kind and name")
    kind = raw.get("kind")
    if kind == "ServiceAccount":
        namespace = raw.get("namespace") or binding_ns
        if not namespace:
            raise RbacError(f"{where}.namespace: required for a ServiceAccount")
        return serviceaccount_user(namespace, raw["name"])
    if kind == "User":
        return str(raw["name"])
    if kind == "Group":
        return f"group:{raw['name']}"
    raise RbacError(f"{where}.kind: {kind!r} is not ServiceAccount, User or Group")


@dataclass
class Authorizer:
    """Tokens to users, and the roles and bindings that decide what each user may do."""

    tokens: dict[str, str] = field(default_factory=dict)
    cluster_roles: dict[str, list[Rule]] = field(default_factory=dict)
    roles: dict[tuple[str, str], list[Rule]] = field(default_factory=dict)
    bindings: list[Binding] = field(default_factory=list)
    # Every request refused, in order: a drill or test shows the worker needed nothing more.
    denied: list[Request] = field(default_factory=list)

    @classmethod
    def from_manifests(
        cls, docs: Iterable[Mapping[str, Any] | None], tokens: Mapping[str, str]
    ) -> Authorizer:
        """Load every Role, ClusterRole, RoleBinding and ClusterRoleBinding; skip the rest."""
        auth = cls(tokens=dict(tokens))
        for i, doc in enumerate(docs):
            if not doc:
                continue
            kind = doc.get("kind")
            meta = doc.get("metadata") or {}
            name = meta.get("name")
            where = f"document {i} ({kind} {name})"
            if kind not in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
                continue
            if not isinstance(name, str) or not name:
                raise RbacError(f"{where}.metadata.name: required")
            namespace = meta.get("namespace")
            if kind in ("Role", "RoleBinding") and not namespace:
                raise RbacError(f"{where}.metadata.namespace: required for a {kind}")
            if kind == "ClusterRole":
                auth.cluster_roles[name] = parse_rules(doc, where)
            elif kind == "Role":
                auth.roles[str(namespace), name] = parse_rules(doc, where)
            else:
                ref = doc.get("roleRef") or {}
                if ref.get("kind") not in ("Role", "ClusterRole") or not ref.get("name"):
                    raise RbacError(f"{where}.roleRef: needs kind Role or ClusterRole and a name")
                if kind == "ClusterRoleBinding" and ref["kind"] == "Role":
                    raise RbacError(
                        f"{where}.roleRef.kind: a ClusterRoleBinding cannot bind a Role"
                    )
                subjects = doc.get("subjects") or []
                if not isinstance(subjects, list):
                    raise RbacError(f"{where}.subjects: expected a list")
                auth.bindings.append(
                    Binding(
                        namespace=namespace if kind == "RoleBinding" else None,
                        role_kind=ref["kind"],
                        role_name=ref["name"],
                        subjects=frozenset(
                            _subject(s, namespace, f"{where}.subjects[{j}]")
                            for j, s in enumerate(subjects)
                        ),
                    )
                )
        return auth

    @classmethod
    def from_file(cls, path: str | Path, tokens: Mapping[str, str]) -> Authorizer:
        """`deploy/rbac.yaml` and the like: a multi-document YAML of RBAC objects."""
        try:
            docs = list(yaml.safe_load_all(Path(path).read_text()))
        except (OSError, yaml.YAMLError) as exc:
            raise RbacError(f"{path}: {exc}") from None
        try:
            return cls.from_manifests(docs, tokens)
        except RbacError as exc:
            raise RbacError(f"{path}: {exc}") from None

    @classmethod
    def for_service_account(cls, token: str, path: Path | None = None) -> Authorizer:
        """`token` is the manifest's ServiceAccount (deploy/rbac.yaml's by default)."""
        path = path or deploy_rbac_path()
        return cls.from_file(path, {token: service_account_of(path)})

    def user(self, token: str) -> str | None:
        return self.tokens.get(token)

    def _rules(self, binding: Binding) -> list[Rule]:
        if binding.role_kind == "ClusterRole":
            return self.cluster_roles.get(binding.role_name, [])
        assert binding.namespace is not None
        return self.roles.get((binding.namespace, binding.role_name), [])

    def allows(self, req: Request) -> bool:
        if req.path is not None and req.path.startswith(DISCOVERY_PREFIXES):
            return True
        who = {req.user, *(f"group:{g}" for g in (req.groups or user_groups(req.user)))}
        for binding in self.bindings:
            if not who & binding.subjects:
                continue
            if binding.namespace is not None and binding.namespace != req.namespace:
                continue
            if any(rule_allows(rule, req) for rule in self._rules(binding)):
                return True
        self.denied.append(req)
        return False


def forbidden_message(req: Request) -> str:
    """The API server's own wording, so a client's error reads as it would on a cluster."""
    if req.path is not None:
        return f'forbidden: User "{req.user}" cannot {req.verb} path "{req.path}"'
    resource = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
    qualified = f"{req.resource}.{req.api_group}" if req.api_group else req.resource
    subject = f'{qualified} "{req.name}"' if req.name else qualified
    where = f' in the namespace "{req.namespace}"' if req.namespace else " at the cluster scope"
    return (
        f'{subject} is forbidden: User "{req.user}" cannot {req.verb} resource "{resource}" '
        f'in API group "{req.api_group}"{where}'
    )
