"""Malformed scenario files: each refused naming the dotted path, and nothing started.

Every row is a file on disk, refused three ways a user meets it: `python -m fleetsim
validate`, `python -m fleetsim serve` (no kubeconfig written) and `fleetmend drill` (no
run directory, no process).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetsim.__main__ import main as fleetsim_main
from fleetsim.scenario import SCENARIO_DIR
from worker.drill import Drill, DrillError, DrillOptions
from worker.settings import load_settings

BASE = (SCENARIO_DIR / "replica-lost.yaml").read_text()


def edited(change: Callable[[dict[str, Any]], None]) -> bytes:
    data = yaml.safe_load(BASE)
    change(data)
    return yaml.safe_dump(data).encode()


def pool(data: dict[str, Any]) -> dict[str, Any]:
    return data["namespaces"][0]["pools"][0]


CASES: list[tuple[str, bytes, str]] = [
    ("unclosed flow sequence", b"name: [unclosed\n", "YAML: "),
    ("tab indentation", b"name: x\nnodes:\n\t- name: gpu\n", "YAML: "),
    ("a key given twice", BASE.encode() + b"name: other\n", "found duplicate key 'name'"),
    ("an empty file", b"", "(top level): expected a mapping, got NoneType"),
    ("a list at the top", b"- name: x\n", "(top level): expected a mapping, got list"),
    ("not UTF-8", b"name: \xff\xfe\n", "unreadable: "),
    ("a misspelt key", edited(lambda d: pool(d).update(replcas=4)),
     "namespaces.0.pools.0.replcas: Extra inputs are not permitted"),
    ("a word for a number", edited(lambda d: pool(d).update(replicas="four")),
     "namespaces.0.pools.0.replicas: "),
    ("a negative count", edited(lambda d: pool(d).update(replicas=-1)),
     "namespaces.0.pools.0.replicas: "),
    ("no node at all", edited(lambda d: d["nodes"][0].update(count=0)), "nodes.0.count: "),
    ("a name Kubernetes refuses", edited(lambda d: d["namespaces"][0].update(name="Serving_NS")),
     "namespaces.0.name: "),
    ("a fraction above one", edited(lambda d: d["rates"].update(cold_frac=1.5)),
     "rates.cold_frac: "),
    ("zero traffic", edited(lambda d: d["traffic"][0].update(rate=0)), "traffic.0.rate: "),
    ("an unknown fault", edited(lambda d: d["faults"][0].update(kind="meteor")),
     "faults.0.kind: "),
    ("a time that is a word", edited(lambda d: d["faults"][0].update(at="soon")),
     "faults.0.at: "),
    ("a fault at a missing pool", edited(lambda d: d["faults"][0]["target"].update(pool="nope")),
     "faults.0.target: no pool serving/nope"),
    ("an engine version that is not one", edited(lambda d: pool(d)["engine"].update(version="latest")),
     "namespaces.0.pools.0.engine.version: "),
    ("a mapping where a list belongs", edited(lambda d: d.update(nodes={"name": "gpu"})),
     "nodes: "),
]  # fmt: skip


@pytest.fixture(params=CASES, ids=[c[0] for c in CASES])
def broken(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    _, content, named = request.param
    path = tmp_path / "broken.yaml"
    path.write_bytes(content)
    return path, named


def test_validate_exits_2_naming_the_dotted_path(
    broken: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, named = broken
    assert fleetsim_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert named in err and str(path) in err


def test_serve_refuses_before_anything_starts(
    broken: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, named = broken
    kubeconfig = tmp_path / "kubeconfig"
    assert fleetsim_main(["serve", str(path), "--kubeconfig-out", str(kubeconfig)]) == 2
    assert named in capsys.readouterr().err
    assert not kubeconfig.exists()


def test_a_drill_refuses_before_anything_starts(broken: tuple[Path, str], tmp_path: Path) -> None:
    path, named = broken
    state = tmp_path / "state"
    with pytest.raises(DrillError) as refused:
        Drill(load_settings(state_dir=state), DrillOptions(scenario=str(path)))
    assert named in str(refused.value)
    assert not state.exists()
