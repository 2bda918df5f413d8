"""Assertions every drill shares: on the result (`--json`) and on the reports it wrote.

Used by `tests/drills/test_*.py`. Each reads the drill's own numbers, so a failure names
what fleetmend got wrong on the simulated fleet, not what a fixture expected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worker.drill import Drill, DrillOptions, DrillResult, IncidentOutcome
from worker.settings import load_settings

APPLIED = ("applied", "confirmed", "compensated")


async def run_drill(
    scenario: str, state_dir: Path, *, speed: float = 20.0, **options: Any
) -> DrillResult:
    return (await drill_and_run(scenario, state_dir, speed=speed, **options))[0]


async def drill_and_run(
    scenario: str, state_dir: Path, *, speed: float = 20.0, **options: Any
) -> tuple[DrillResult, Drill]:
    """The drill's result and the drill itself (its run directory, tokens and incidents)."""
    settings = load_settings(state_dir=state_dir)
    opts = DrillOptions(
        scenario=scenario,
        speed=speed,
        free_ports=True,
        auto_approve=options.pop("auto_approve", True),
        timeout_s=options.pop("timeout_s", 420),
        **options,
    )
    run = Drill(settings, opts)
    return await run.run(), run


def files_holding(root: Path, secrets: dict[str, str], allowed: set[str]) -> list[str]:
    """`path: secret name` for every file under root (but `allowed` names) holding one."""
    hits = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name not in allowed:
            data = path.read_bytes()
            hits += [
                f"{path.relative_to(root)}: {n}" for n, v in secrets.items() if v.encode() in data
            ]
    return hits


def reports_of(result: DrillResult) -> list[dict[str, Any]]:
    """The JSON reports, one per incident, in the result's incident order."""
    reports = [json.loads(Path(p).with_suffix(".json").read_text()) for p in result.report_paths]
    by_id = {r["incident_id"]: r for r in reports}
    return [by_id[i.incident_id] for i in result.incidents]


def timeline(report: dict[str, Any], step: str) -> list[dict[str, Any]]:
    return [e for e in report["timeline"] if e["step"] == step]


def failed_checks(report: dict[str, Any]) -> dict[str, Any]:
    """The verification checks that failed last, with their evidence (a failure's message)."""
    verify = timeline(report, "verify")
    checks = verify[-1]["evidence"].get("checks", {}) if verify else {}
    return {name: c for name, c in checks.items() if not c.get("passed")}


def assert_dead_endpoints_out_and_never_routed_again(result: DrillResult) -> None:
    assert result.time_to_deroute_s, "the drill lost no replica"
    missing = [pod for pod, s in result.time_to_deroute_s.items() if s is None]
    assert not missing, f"still in the ready set at the end: {missing}"
    routed = {pod: n for pod, n in result.routed_after_deroute.items() if n}
    assert not routed, f"requests routed after deroute: {routed}"


def assert_exactly_once(result: DrillResult) -> None:
    assert result.effects.applied > 0
    assert (result.effects.duplicates, result.effects.orphans) == (0, 0)
    assert result.duplicate_actions == 0


def assert_shedding_removed_only_with_the_warm_floor_back(
    incident: IncidentOutcome, report: dict[str, Any]
) -> bool:
    """The emergency shedding comes off only after verification found the warm floor back;
    otherwise it stays. Returns whether it came off."""
    steps = [s.step for s in incident.steps]
    assert steps.index("verify") < steps.index("roll-back")
    (verify,) = timeline(report, "verify")[-1:]
    (roll_back,) = timeline(report, "roll-back")[-1:]
    floor = verify["evidence"]["checks"]["warm-floor-restored"]
    verified = all(c["passed"] for c in verify["evidence"]["checks"].values())
    if "kept" in roll_back["evidence"]:
        assert not verified, f"shedding kept though verification passed: {roll_back['evidence']}"
        return False
    assert floor["passed"] is True and verified
    rolled_back = {e["compensates"] for e in report["effects"] if e["compensates"]}
    applied = [e for e in report["effects"] if e["kind"] == "shed-tier"]
    assert all(e["op_id"] in rolled_back for e in applied), "a shed tier was never rolled back"
    return True


def assert_report_matches_result(result: DrillResult) -> None:
    """A report per incident, in three formats, carrying the drill's own numbers."""
    assert len(result.report_paths) == len(result.incidents)
    for path in result.report_paths:
        html = Path(path)
        assert html.read_text().count("data:image/png;base64,") == 1
        assert html.with_suffix(".md").read_text().startswith("#")
    reports = reports_of(result)
    applied = duplicates = orphans = 0
    for incident, report in zip(result.incidents, reports, strict=True):
        summary = report["summary"]
        assert summary["severity"] == incident.severity
        assert summary["status"] == f"{incident.status} ({incident.outcome})"
        namespace, pool = report["namespace"], report["pool"]
        switch = [
            s
            for pod, s in result.time_to_deroute_s.items()
            if pod.startswith(f"{namespace}/") and s is not None
        ]
        assert summary["switch_s"] == (max(switch) if switch else None)
        assert summary["capacity_restored_s"] == result.time_to_warm_floor_s.get(
            f"{namespace}/{pool}"
        )
        assert [(e["step"], e["outcome"]) for e in report["timeline"]] == [
            (s.step, s.outcome) for s in incident.steps
        ]
        applied += sum(e["state"] in APPLIED for e in report["effects"])
        duplicates += sum(f["kind"] == "duplicate" for f in report["findings"])
        orphans += sum(f["kind"] == "orphan" for f in report["findings"])
        table = report["summary_table"]
        assert table["Duplicates"] == str(sum(f["kind"] == "duplicate" for f in report["findings"]))
        assert table["Severity"] == incident.severity
    assert (applied, duplicates, orphans) == (
        result.effects.applied,
        result.effects.duplicates,
        result.effects.orphans,
    )
