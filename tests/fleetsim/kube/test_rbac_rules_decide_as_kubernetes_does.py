"""RBAC: rules, bindings and scopes decide a request as Kubernetes' RBAC authorizer does."""

from __future__ import annotations

from typing import Any

import pytest

from fleetsim.kube.rbac import (
    Authorizer,
    RbacError,
    Request,
    Rule,
    forbidden_message,
    request_verb,
    rule_allows,
    serviceaccount_user,
)

SA = serviceaccount_user("ops", "bot")
OTHER = serviceaccount_user("ops", "intruder")


def role(kind: str, name: str, rules: list[dict[str, Any]], ns: str | None = None) -> dict:
    meta: dict[str, Any] = {"name": name}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "rules": rules}  # fmt: skip


def binding(kind: str, role_kind: str, role_name: str, subjects: list[dict], ns: str | None = None):
    meta: dict[str, Any] = {"name": f"bind-{role_name}"}
    if ns:
        meta["namespace"] = ns
    return {"kind": kind, "metadata": meta, "subjects": subjects,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                        "name": role_name}}  # fmt: skip


SA_SUBJECT = {"kind": "ServiceAccount", "name": "bot", "namespace": "ops"}


def granting(verb: str, resource: str, role_kind: str, binding_kind: str,
             subject: dict[str, str], ns: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """A role with one rule for `verb` on `resource` (core group) and one binding to it."""
    rules = [{"apiGroups": [""], "resources": [resource], "verbs": [verb]}]
    return [
        role(role_kind, "r", rules, ns=ns if role_kind == "Role" else None),
        binding(binding_kind, role_kind, "r", [subject], ns=ns),
    ]


def pods(verb: str, ns: str | None = "serving", name: str | None = "p", **kw: Any) -> Request:
    return Request(user=SA, verb=verb, resource="pods", namespace=ns, name=name, **kw)


@pytest.mark.parametrize(
    ("rule", "request_", "allowed"),
    [
        (Rule(frozenset({"get"}), frozenset({""}), frozenset({"pods"})), pods("get"), True),
        (Rule(frozenset({"get"}), frozenset({""}), frozenset({"pods"})), pods("delete"), False),
        (Rule(frozenset({"*"}), frozenset({""}), frozenset({"pods"})), pods("delete"), True),
        (Rule(frozenset({"get"}), frozenset({"apps"}), frozenset({"pods"})), pods("get"), False),
        (Rule(frozenset({"get"}), frozenset({"*"}), frozenset({"*"})), pods("get"), True),
        # A subresource needs its own `resource/sub` entry; the parent does not grant it.
        (Rule(frozenset({"create"}), frozenset({""}), frozenset({"pods"})),
         pods("create", subresource="eviction"), False),
        (Rule(frozenset({"create"}), frozenset({""}), frozenset({"pods/eviction"})),
         pods("create", subresource="eviction"), True),
        (Rule(frozenset({"patch"}), frozenset({""}), frozenset({"*/scale"})),
         pods("patch", subresource="scale"), True),
        # resourceNames restricts to those names and never covers a nameless list.
        (Rule(frozenset({"get", "list"}), frozenset({""}), frozenset({"pods"}), frozenset({"p"})),
         pods("get"), True),
        (Rule(frozenset({"get"}), frozenset({""}), frozenset({"pods"}), frozenset({"q"})),
         pods("get"), False),
        (Rule(frozenset({"list"}), frozenset({""}), frozenset({"pods"}), frozenset({"p"})),
         pods("list", name=None), False),
        (Rule(frozenset({"get"}), non_resource_urls=frozenset({"/metrics"})),
         Request(user=SA, verb="get", path="/metrics"), True),
        (Rule(frozenset({"get"}), non_resource_urls=frozenset({"/logs/*"})),
         Request(user=SA, verb="get", path="/logs/kubelet"), True),
        (Rule(frozenset({"get"}), frozenset({""}), frozenset({"pods"})),
         Request(user=SA, verb="get", path="/metrics"), False),
    ],
)  # fmt: skip
def test_one_rule_matches_verb_group_resource_subresource_and_name(
    rule: Rule, request_: Request, allowed: bool
) -> None:
    assert rule_allows(rule, request_) is allowed


@pytest.mark.parametrize(
    ("method", "named", "watch", "verb"),
    [
        ("GET", True, False, "get"),
        ("GET", False, False, "list"),
        ("GET", False, True, "watch"),
        ("POST", False, False, "create"),
        ("PUT", True, False, "update"),
        ("PATCH", True, False, "patch"),
        ("DELETE", True, False, "delete"),
        ("DELETE", False, False, "deletecollection"),
    ],
)
def test_the_verb_is_derived_from_the_method_and_whether_a_name_is_given(
    method: str, named: bool, watch: bool, verb: str
) -> None:
    assert request_verb(method, named=named, watch=watch) == verb


def test_a_rolebinding_grants_only_in_its_own_namespace_even_for_a_clusterrole() -> None:
    docs = granting("get", "pods", "ClusterRole", "RoleBinding", SA_SUBJECT, ns="serving")
    auth = Authorizer.from_manifests(docs, tokens={})
    assert auth.allows(pods("get", ns="serving"))
    assert not auth.allows(pods("get", ns="batch"))
    assert not auth.allows(pods("get", ns=None))


def test_a_clusterrolebinding_grants_everywhere_and_only_to_its_subjects() -> None:
    docs = granting("list", "nodes", "ClusterRole", "ClusterRoleBinding", SA_SUBJECT)
    auth = Authorizer.from_manifests(docs, tokens={})
    assert auth.allows(Request(user=SA, verb="list", resource="nodes"))
    assert not auth.allows(Request(user=OTHER, verb="list", resource="nodes"))


def test_a_namespaced_role_binds_to_a_serviceaccounts_group() -> None:
    group = {"kind": "Group", "name": "system:serviceaccounts:ops"}
    auth = Authorizer.from_manifests(
        granting("list", "pods", "Role", "RoleBinding", group, ns="serving"), tokens={}
    )
    assert auth.allows(pods("list", name=None))
    assert not auth.allows(Request(user="alice", verb="list", resource="pods", namespace="serving"))


def test_tokens_name_users_and_discovery_is_open_to_every_authenticated_user() -> None:
    auth = Authorizer.from_manifests([], tokens={"t0ken": SA})
    assert auth.user("t0ken") == SA and auth.user("guess") is None
    assert auth.allows(Request(user=SA, verb="get", path="/apis"))
    assert not auth.allows(pods("get"))


def test_the_forbidden_message_names_the_user_verb_resource_and_namespace() -> None:
    message = forbidden_message(
        Request(
            user=SA,
            verb="delete",
            api_group="apps",
            resource="deployments",
            namespace="serving",
            name="llm",
        )
    )
    assert message == (
        'deployments.apps "llm" is forbidden: User "system:serviceaccount:ops:bot" cannot '
        'delete resource "deployments" in API group "apps" in the namespace "serving"'
    )


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        (role("Role", "r", []), "metadata.namespace"),
        (role("ClusterRole", "r", [{"verbs": ["get"], "apiGroups": [""]}]), "rules[0]"),
        (role("ClusterRole", "r", [{"verbs": "get", "resources": ["pods"]}]), "rules[0].verbs"),
        (role("ClusterRole", "r", [{"verbs": [], "resources": ["pods"]}]), "rules[0].verbs"),
        (binding("ClusterRoleBinding", "Role", "r", [SA_SUBJECT]), "roleRef.kind"),
        (binding("ClusterRoleBinding", "ClusterRole", "r", [{"kind": "ServiceAccount",
                                                             "name": "x"}]),
         "subjects[0].namespace"),
        (binding("ClusterRoleBinding", "ClusterRole", "r", [{"kind": "Robot", "name": "x"}]),
         "subjects[0].kind"),
    ],
)  # fmt: skip
def test_a_malformed_manifest_is_refused_naming_the_field(doc: dict, named: str) -> None:
    with pytest.raises(RbacError, match=named.replace("[", r"\[").replace("]", r"\]")):
        Authorizer.from_manifests([doc], tokens={})
