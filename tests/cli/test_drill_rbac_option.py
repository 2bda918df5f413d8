"""`fleetmend drill --rbac`: the fleet enforces deploy/rbac.yaml on the worker's token, and
outside a source checkout the drill says which file it could not find."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetsim.kube import rbac
from worker.drill import Drill, DrillError, DrillOptions
from worker.settings import load_settings


def test_with_rbac_the_fleets_token_is_the_workers_service_account(tmp_path: Path) -> None:
    drill = Drill(load_settings(state_dir=tmp_path), DrillOptions(rbac=True))
    assert drill.authorizer is not None
    assert drill.authorizer.tokens == {
        drill.fleet.kube_token: "system:serviceaccount:fleetmend:fleetmend-worker"
    }
    assert drill.forbidden() == []


def test_without_rbac_nothing_is_enforced(tmp_path: Path) -> None:
    drill = Drill(load_settings(state_dir=tmp_path), DrillOptions())
    assert drill.authorizer is None and drill.forbidden() == []


def test_rbac_outside_a_source_checkout_names_the_missing_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rbac, "REPOSITORY_ROOT", tmp_path / "site-packages")
    with pytest.raises(DrillError, match=r"site-packages/deploy/rbac\.yaml: not found"):
        Drill(load_settings(state_dir=tmp_path), DrillOptions(rbac=True))
