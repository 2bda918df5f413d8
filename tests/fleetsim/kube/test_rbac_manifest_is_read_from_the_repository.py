"""The worker's RBAC manifest comes from the source checkout, with an error naming what is
missing when it is not there (`deploy/` is not packaged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetsim.kube.rbac import (
    Authorizer,
    RbacError,
    Request,
    deploy_rbac_path,
    service_account_of,
)


def test_the_manifest_is_the_checkouts_deploy_rbac_yaml() -> None:
    path = deploy_rbac_path()
    assert path.parts[-2:] == ("deploy", "rbac.yaml") and path.is_file()


def test_a_root_without_the_manifest_is_named_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(RbacError, match=r"deploy/rbac\.yaml: not found.*source checkout"):
        deploy_rbac_path(tmp_path)


def test_the_worker_is_the_one_service_account_the_manifest_creates() -> None:
    assert service_account_of(deploy_rbac_path()) == (
        "system:serviceaccount:fleetmend:fleetmend-worker"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("kind: Role\nmetadata: {name: r, namespace: n}\n", "expected one ServiceAccount, found 0"),
        (
            "kind: ServiceAccount\nmetadata: {name: a}\n",
            "needs metadata.name and metadata.namespace",
        ),
        ("kind: [unclosed\n", "while parsing"),
    ],
)
def test_a_manifest_without_exactly_one_named_service_account_is_refused(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "rbac.yaml"
    path.write_text(text)
    with pytest.raises(RbacError, match=problem):
        service_account_of(path)


def test_the_workers_token_gets_what_the_manifest_grants_and_nothing_else() -> None:
    auth = Authorizer.for_service_account("t0k3n")
    user = auth.user("t0k3n")
    assert user == service_account_of(deploy_rbac_path())
    assert auth.allows(Request(user=user, verb="list", resource="pods", namespace="serving"))
    assert not auth.allows(Request(user=user, verb="list", resource="secrets", namespace="serving"))
    assert [r.resource for r in auth.denied] == ["secrets"]
