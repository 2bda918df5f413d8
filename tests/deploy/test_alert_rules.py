"""deploy/alert-rules.yaml and deploy/alertmanager.yml, checked by Prometheus' own tools.

promtool checks the rules and runs their unit tests (tests/deploy/alert-rules.test.yaml);
every alert those tests expect is then fed to the intake's label mapping, so the labels the
rules produce and the labels the intake reads cannot drift apart. amtool checks the
Alertmanager example and that fleetmend's alerts route to the intake's receiver.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from worker.alerts import FAULT_KINDS, LabelMapping, MappedFiring, map_alert

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "alert-rules.yaml"
RULE_TESTS = Path(__file__).parent / "alert-rules.test.yaml"
ALERTMANAGER = REPO / "deploy" / "alertmanager.yml"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(
            f"{name} is not installed: apt-get install prometheus prometheus-alertmanager"
        )
    return path


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=cwd)


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def expected_alerts() -> list[dict[str, str]]:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    return [
        alert["exp_labels"]
        for test in tests
        for case in test["alert_rule_test"]
        for alert in case.get("exp_alerts", [])
    ]


def test_promtool_accepts_the_rules() -> None:
    result = run(tool("promtool"), "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_the_rules_unit_tests_pass_under_promtool() -> None:
    result = run(tool("promtool"), "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_rule_is_unit_tested_and_routes_to_fleetmend_with_a_known_fault() -> None:
    tested = {labels["alertname"] for labels in expected_alerts()}
    for rule in rules():
        assert rule["alert"] in tested, f"{rule['alert']} has no promtool test"
        assert rule["labels"]["fleetmend"] == "true"
        assert rule["labels"]["fault"] in FAULT_KINDS


@pytest.mark.parametrize(
    "labels",
    expected_alerts(),
    ids=lambda labels: (
        f"{labels['alertname']}-{labels['pod']}" if "pod" in labels else labels["alertname"]
    ),
)
def test_each_alert_the_rules_produce_maps_to_a_lost_replica(labels: dict[str, str]) -> None:
    raw = {"status": "firing", "labels": labels, "startsAt": "2026-11-29T08:00:00Z"}
    mapped = map_alert(0, raw, LabelMapping())
    assert isinstance(mapped, MappedFiring), mapped
    lost = mapped.lost
    assert (lost.namespace, lost.pool, lost.fault) == (
        labels["namespace"],
        labels["pool"],
        labels["fault"],
    )
    assert lost.pod == labels.get("pod")
    assert lost.node == labels.get("node")


def test_amtool_accepts_the_alertmanager_example() -> None:
    result = run(tool("amtool"), "check-config", str(ALERTMANAGER))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_fleetmend_alerts_reach_the_intake_receiver_and_others_do_not() -> None:
    amtool = tool("amtool")
    ours = run(
        amtool,
        "config",
        "routes",
        "test",
        f"--config.file={ALERTMANAGER}",
        "fleetmend=true",
        "alertname=FleetmendPodNotReady",
        "namespace=llm",
        "pool=p",
    )
    theirs = run(
        amtool,
        "config",
        "routes",
        "test",
        f"--config.file={ALERTMANAGER}",
        "alertname=DiskFull",
        "namespace=llm",
    )
    assert ours.stdout.strip() == "fleetmend", ours.stdout + ours.stderr
    assert theirs.stdout.strip() == "default", theirs.stdout + theirs.stderr


def test_the_webhook_sends_resolutions_and_a_bearer_token_from_a_file() -> None:
    config = yaml.safe_load(ALERTMANAGER.read_text())
    receiver = next(r for r in config["receivers"] if r["name"] == "fleetmend")
    webhook = receiver["webhook_configs"][0]
    assert webhook["url"].endswith("/alertmanager")
    assert webhook["send_resolved"] is True
    auth = webhook["http_config"]["authorization"]
    assert auth["type"] == "Bearer"
    assert "credentials_file" in auth and "credentials" not in auth
