"""Shipped scenarios as drills on the real stack, with assertions on their outcome.

Each test runs `fleetmend drill` in-process: fleetsim here, and the embedded PostgreSQL,
the Temporal dev server, the worker and the intake as child processes. The fleet runs 20x
faster than the wall clock and the incident's own waits are scaled to match; fleetmend's
reactions run at real speed. The other shipped scenarios are in `test_scenarios.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.drills.checks import (
    assert_dead_endpoints_out_and_never_routed_again,
    assert_report_matches_result,
    drill_and_run,
    files_holding,
    reports_of,
    run_drill,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


async def test_replica_lost_recovers_exactly_once_and_restores_the_warm_floor(
    drill_dir: Path,
) -> None:
    result, run = await drill_and_run("replica-lost", drill_dir)

    (incident,) = result.incidents
    assert incident.status == "COMPLETED"
    assert incident.outcome == "recovered"
    assert_dead_endpoints_out_and_never_routed_again(result)
    assert result.effects.applied > 0
    assert (result.effects.duplicates, result.effects.orphans, result.effects.drift) == (0, 0, 0)
    assert result.duplicate_actions == 0
    assert result.time_to_warm_floor_s["serving/inference-llm"] is not None
    steps = [s.step for s in incident.steps]
    # The emergency shedding comes off only after verification found the warm floor back.
    assert steps.index("rebuild-warm-floor") < steps.index("verify") < steps.index("roll-back")
    (report,) = reports_of(result)
    verify = [e for e in report["timeline"] if e["step"] == "verify"][-1]
    assert verify["evidence"]["checks"]["warm-floor-restored"]["passed"] is True
    # The report carries the drill's own numbers.
    assert report["summary"]["switch_s"] == max(result.time_to_deroute_s.values())
    assert report["summary_table"]["Duplicates"] == "0"
    assert_report_matches_result(result)
    # No secret reaches a log, a report, the ledger's or Temporal's files, or the status query.
    secrets = {
        "intake token": run.token,
        "kube token": str(run.fleet.kube_token),
        "incident channel's secret": run.channel.secret,
    }
    assert run.channel.received, "the incident channel got no message"
    assert files_holding(run.run_dir, secrets, allowed={"kubeconfig"}) == []
    statuses = json.dumps([info.get("status") for info in run.incidents.values()], default=str)
    assert "timeline" in statuses and not [n for n, v in secrets.items() if v in statuses]
    # The worker read the router's per-replica counts from fleetsim's /metrics.
    inflight = [e for e in report["timeline"] if e["step"] == "inflight"][-1]["evidence"]
    assert inflight["counts_available"] is True
    lost = {ref.partition("/")[2] for ref in result.time_to_deroute_s}
    assert set(inflight["per_replica"]) == lost


async def test_rack_outage_is_an_outage_and_stops_at_the_blast_radius_until_approved(
    drill_dir: Path,
) -> None:
    result = await run_drill("rack-outage", drill_dir)

    (incident,) = result.incidents
    assert incident.severity == "outage"
    assert_dead_endpoints_out_and_never_routed_again(result)
    assert len(result.time_to_deroute_s) == 3
    gates = {a.kind for a in result.approvals}
    assert "blast-radius" in gates
    (report,) = reports_of(result)
    beyond = [
        e for e in report["timeline"] if e["step"] == "blast-radius" and e["outcome"] == "beyond"
    ]
    assert beyond, "automatic derouting did not stop at the blast-radius limit"
    assert beyond[0]["evidence"]["limit"] == 0.25
    assert (result.effects.duplicates, result.effects.orphans) == (0, 0)
    assert_report_matches_result(result)
