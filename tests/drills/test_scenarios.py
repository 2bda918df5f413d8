"""Every other shipped scenario as a drill on the real stack, asserted on its outcome.

Each test runs `fleetmend drill SCENARIO` in-process (fleetsim here; the embedded
PostgreSQL, the Temporal dev server, the worker and the intake as child processes), at
20x with every gate approved. Shared for every scenario: the dead endpoint leaves the
ready set and gets nothing after; 0 duplicates and 0 orphans after reconciliation; the
emergency shedding comes off only with the warm floor back (and the warm floor is back
where the scenario has room for it); a report per incident in three formats, carrying
the drill's own numbers. Then what is particular to each scenario.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fleetsim.kubelet import HEARTBEAT_S
from fleetsim.scenario import bundled_scenarios, load_scenario
from tests.drills.checks import (
    assert_dead_endpoints_out_and_never_routed_again,
    assert_exactly_once,
    assert_report_matches_result,
    assert_shedding_removed_only_with_the_warm_floor_back,
    failed_checks,
    reports_of,
    run_drill,
    timeline,
)
from worker.drill import DrillResult

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

Check = Callable[[DrillResult, list[dict[str, Any]]], None]


@dataclass(frozen=True)
class Expected:
    outcome: str = "recovered"
    # The scenario keeps warm spares and has the GPUs to rebuild them after the loss.
    warm_floor_restored: bool = True
    specific: list[Check] = field(default_factory=list)


NODE_MONITOR_GRACE_S = 40.0  # fleetsim's node controller default, as in Kubernetes


def node_alert_fires_after_not_ready(result: DrillResult, reports: list[dict[str, Any]]) -> None:
    # The rule reads the node's Ready condition: the alert comes after the 40 s grace,
    # when the node controller has already taken the pod's endpoint out. The grace runs
    # from the kubelet's last heartbeat, up to one heartbeat period before the fault.
    (report,) = reports
    assert report["summary"]["detection_s"] >= NODE_MONITOR_GRACE_S - HEARTBEAT_S
    assert all(s is not None and s < 1.0 for s in result.time_to_deroute_s.values())


def the_group_leaves_by_its_leader(result: DrillResult, reports: list[dict[str, Any]]) -> None:
    # A worker rank has no endpoint: the group's leader is what leaves the ready set.
    (pod,) = result.time_to_deroute_s
    assert pod == "serving/inference-405b-0"
    (report,) = reports
    (deroute,) = [e for e in timeline(report, "deroute") if e["outcome"] == "done"]
    assert deroute["evidence"]["inference-405b-0"]["group"] == "inference-405b-0"
    (assess,) = timeline(report, "assess")
    assert assess["evidence"]["warm_floor"] == 1  # one spare group, not its two pods


def xid_is_triaged_as_a_gpu_fault(result: DrillResult, reports: list[dict[str, Any]]) -> None:
    (report,) = reports
    (triage,) = timeline(report, "triage")
    (node,) = triage["evidence"].values()
    assert node["runbook"] == "gpu-fault" and "Xid 79" in node["reason"]


def lead_time_announced_as_a_number(result: DrillResult, reports: list[dict[str, Any]]) -> None:
    scenario = load_scenario("no-warm-capacity")
    load_s = scenario.pool_rates(scenario.pool("serving", "inference-llm")).load_s
    announced = [n for n in result.notifications if n.milestone == "lead-time"]
    assert announced, [n.milestone for n in result.notifications]
    seconds = announced[0].fact("provisioning lead time")
    assert isinstance(seconds, int | float)
    # Observed from the pool's own past startups, each of which loaded the weights first.
    assert seconds >= load_s
    assert f"{seconds / 60:.0f} minutes" in announced[0].title


def report_says_fragmentation(result: DrillResult, reports: list[dict[str, Any]]) -> None:
    (report,) = reports
    (reschedule,) = timeline(report, "reschedule")
    assert reschedule["evidence"]["diagnosis"] == "fragmentation"
    assert any("fragmentation" in note for note in report["summary"]["notes"])
    markdown = Path(result.report_paths[0]).with_suffix(".md").read_text()
    assert "fragmentation" in markdown.lower()
    assert any(n.milestone == "fragmentation" for n in result.notifications)


def rollout_is_a_common_cause_and_nothing_churns(
    result: DrillResult, reports: list[dict[str, Any]]
) -> None:
    (incident,) = result.incidents
    assert "rollout" in incident.common_causes
    (report,) = reports
    assert not [e for e in report["effects"] if e["kind"] in ("scale", "cordon-node")]
    (provision,) = timeline(report, "provision")
    assert "rollout" in provision["evidence"]["scale"]
    assert "provision" not in {a.kind for a in result.approvals}
    assert any(n.milestone == "bad-rollout" for n in result.notifications)


def the_replacement_is_seen_stuck_on_its_image(
    result: DrillResult, reports: list[dict[str, Any]]
) -> None:
    (report,) = reports
    (ramp,) = timeline(report, "ramp")
    assert set(ramp["evidence"]["stuck"].values()) <= {"ErrImagePull", "ImagePullBackOff"}
    assert ramp["evidence"]["stuck"]


# A TTFT p99 over the SLO can be a figure of the simulated fleet rather than of fleetmend:
# node-lost failed so in 3 of 5 runs after no-warm-capacity while a stall of fleetsim's
# loop bunched requests in the engines' queues, and in 0 of 3 once engines admitted them
# at their offered arrival. Whatever its cause, fleetmend keeping its measures then is
# the runbook's rule.
FLEET_FIGURES = {"ttft-p99-per-pod-under-slo"}


def assert_measures_kept_for_good_reason(
    outcome: str, expected: str, report: dict[str, Any]
) -> bool:
    """The other outcome a recovery may have, and whether verification failed for it.

    Either verified, but the ramp stopped short of a new replica's full share because its
    TTFT p99 neared the SLO, and said so; or verification failed on TTFT p99 alone, and
    fleetmend, as it must, kept the emergency measures rather than roll them back (the
    caller then checks they stayed). Any other failed check fails the drill.
    """
    assert (expected, outcome) == ("recovered", "recovered-measures-kept"), failed_checks(report)
    failed = failed_checks(report)
    if failed:
        assert set(failed) <= FLEET_FIGURES, failed
        (roll_back,) = timeline(report, "roll-back")[-1:]
        assert "kept" in roll_back["evidence"], roll_back
        return True
    (ramp,) = timeline(report, "ramp")[-1:]
    assert ramp["evidence"]["completed"] is False or ramp["evidence"]["held_back"], ramp
    return False


SCENARIOS: dict[str, Expected] = {
    "node-lost": Expected(specific=[node_alert_fires_after_not_ready]),
    "rank-lost": Expected(specific=[the_group_leaves_by_its_leader]),
    "xid-under-healthy-pod": Expected(specific=[xid_is_triaged_as_a_gpu_fault]),
    "fake-alive": Expected(),
    "no-warm-capacity": Expected(specific=[lead_time_announced_as_a_number]),
    # 4 GPUs free as 2+2 and no node with 4: capacity cannot come back, so shedding stays.
    "fragmentation": Expected(
        outcome="recovered-measures-kept",
        warm_floor_restored=False,
        specific=[report_says_fragmentation],
    ),
    # Every replica of the new revision crash-loops (fleetsim replaces the old ones at once):
    # nothing comes back until the revision is reverted, which is an operator's call.
    "bad-rollout": Expected(
        outcome="recovered-measures-kept",
        warm_floor_restored=False,
        specific=[rollout_is_a_common_cause_and_nothing_churns],
    ),
    # The registry is down for the pool: the replacement and a new spare cannot start.
    "image-pull-failure": Expected(
        outcome="recovered-measures-kept",
        warm_floor_restored=False,
        specific=[the_replacement_is_seen_stuck_on_its_image],
    ),
    "disk-full": Expected(),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_a_shipped_scenario_recovers_as_its_runbook_says(
    scenario: str, drill_dir: Path
) -> None:
    expected = SCENARIOS[scenario]
    result = await run_drill(scenario, drill_dir)

    assert result.incidents
    reports = reports_of(result)
    unverified: list[str] = []
    for incident, report in zip(result.incidents, reports, strict=True):
        assert incident.status == "COMPLETED"
        if incident.outcome != expected.outcome and assert_measures_kept_for_good_reason(
            incident.outcome, expected.outcome, report
        ):
            unverified.append(incident.workflow_id)
    assert_dead_endpoints_out_and_never_routed_again(result)
    assert_exactly_once(result)
    removed = [
        assert_shedding_removed_only_with_the_warm_floor_back(incident, report)
        for incident, report in zip(result.incidents, reports, strict=True)
    ]
    floors = list(result.time_to_warm_floor_s.values())
    if expected.warm_floor_restored:
        # Measures kept after a failed verification were checked to stay, above.
        assert all(
            r
            for r, i in zip(removed, result.incidents, strict=True)
            if i.workflow_id not in unverified
        )
        assert floors and None not in floors
    else:
        assert not any(removed)
    assert_report_matches_result(result)
    for check in expected.specific:
        check(result, reports)


def test_every_shipped_scenario_is_drilled_in_ci() -> None:
    in_ci = set(SCENARIOS) | {"replica-lost", "rack-outage"}  # tests/drills/test_drills.py
    assert set(bundled_scenarios()) - in_ci <= {"ramp-experiment"}


def report_with(failed: dict[str, Any], roll_back: dict[str, Any]) -> dict[str, Any]:
    checks = {"warm-floor-restored": {"passed": True}, **failed}
    return {
        "timeline": [
            {"step": "ramp", "evidence": {"completed": True, "held_back": []}},
            {"step": "verify", "evidence": {"checks": checks}},
            {"step": "roll-back", "evidence": roll_back},
        ]
    }


def test_a_drill_accepts_measures_kept_when_only_ttft_failed_and_they_stayed() -> None:
    report = report_with(
        {"ttft-p99-per-pod-under-slo": {"passed": False}}, {"kept": "verification failed"}
    )
    assert assert_measures_kept_for_good_reason("recovered-measures-kept", "recovered", report)


def test_a_drill_fails_when_ttft_failed_but_the_measures_were_rolled_back() -> None:
    report = report_with({"ttft-p99-per-pod-under-slo": {"passed": False}}, {"restored": 2})
    with pytest.raises(AssertionError):
        assert_measures_kept_for_good_reason("recovered-measures-kept", "recovered", report)


def test_a_drill_fails_when_verification_failed_on_anything_but_ttft() -> None:
    report = report_with(
        {"survivors-queue-drained": {"passed": False}}, {"kept": "verification failed"}
    )
    with pytest.raises(AssertionError):
        assert_measures_kept_for_good_reason("recovered-measures-kept", "recovered", report)
