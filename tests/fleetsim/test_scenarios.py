"""Scenario files: every bundled one validates; a bad one is refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleetsim.scenario import (
    SCENARIO_DIR,
    ScenarioError,
    bundled_scenarios,
    load_scenario,
    parse_scenario,
)

REQUIRED = {
    "replica-lost", "node-lost", "rack-outage", "rank-lost", "xid-under-healthy-pod",
    "fake-alive", "no-warm-capacity", "fragmentation", "bad-rollout",
}  # fmt: skip


def base() -> dict:
    return yaml.safe_load((SCENARIO_DIR / "replica-lost.yaml").read_text())


def test_every_required_scenario_ships_and_validates() -> None:
    assert set(bundled_scenarios()) >= REQUIRED
    for name in bundled_scenarios():
        s = load_scenario(name)
        assert s.name == name
        assert s.faults, name


def test_rack_outage_puts_three_of_eight_serving_replicas_in_rack_1() -> None:
    s = load_scenario("rack-outage")
    pool = s.pool("serving", "inference-llm")
    serving_nodes = [g for g in s.nodes if g.labels.items() >= pool.node_selector.items()]
    assert pool.replicas == 8 and sum(g.count for g in serving_nodes) == 8
    assert sum(g.count for g in serving_nodes if g.rack == "rack-1") == 3
    assert s.faults[0].target.rack == "rack-1"


def test_a_misspelt_field_is_named() -> None:
    data = base()
    data["namespaces"][0]["pools"][0]["replcas"] = 4
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    assert "namespaces.0.pools.0.replcas: Extra inputs are not permitted" in str(err.value)


def test_a_bad_value_is_named() -> None:
    data = base()
    data["rates"]["cold_frac"] = 1.5
    data["faults"][0]["kind"] = "meteor"
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    problems = err.value.problems
    assert any(p.startswith("rates.cold_frac:") for p in problems)
    assert any(p.startswith("faults.0.kind:") for p in problems)


def test_a_fault_aimed_at_a_missing_pool_is_refused() -> None:
    data = base()
    data["faults"][0]["target"]["pool"] = "nope"
    with pytest.raises(ScenarioError, match=r"faults\.0\.target: no pool serving/nope"):
        parse_scenario(data)


def test_a_fault_without_the_target_it_needs_is_refused() -> None:
    data = base()
    data["faults"][0]["target"] = {}
    with pytest.raises(ScenarioError, match=r"pod-oom-killed needs target\.namespace"):
        parse_scenario(data)


def test_unparseable_yaml_and_missing_files_are_scenario_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="YAML"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="bundled: "):
        load_scenario("no-such-scenario")
    with pytest.raises(ScenarioError, match="expected a mapping"):
        parse_scenario(["a", "list"])
