"""Incidents run through a sick Kubernetes API and still recover, each effect applied once.

`kube-api-faults.yaml` loses one replica in each of three pools while that pool's
namespace gets 30 s (wall) of one sickness: 500s, 429s with Retry-After 3 s, and timeouts
whose mutations are applied before the answer is lost. Changes are refused and reads
pass, so the incident's first mutating step, the deroute, meets the window and retries
through it (the protection step's patch too, when it comes in time). The drill runs the
real stack (embedded PostgreSQL, Temporal dev server, worker and intake processes) with
the fleet 20x faster than the wall clock. fleetsim counts every mutating request itself,
so "applied once" is the API server's word, not the ledger's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from worker.drill import Drill, DrillOptions, DrillResult
from worker.settings import load_settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCENARIO = Path(__file__).with_name("kube-api-faults.yaml")
KINDS = ("error", "throttle", "timeout")


def namespace(kind: str) -> str:
    return f"chaos-{kind}"


def reports(result: DrillResult) -> dict[str, dict[str, Any]]:
    out = {}
    for path in result.report_paths:
        report = json.loads(Path(path).with_suffix(".json").read_text())
        out[report["namespace"]] = report
    return out


def retries(timeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for e in timeline for r in (e["evidence"].get("retries") or [])]


@pytest.fixture(scope="module")
def drill_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DrillResult, Drill]:
    settings = load_settings(state_dir=tmp_path_factory.mktemp("kube-api-faults"))
    options = DrillOptions(
        scenario=str(SCENARIO), speed=20, free_ports=True, auto_approve=True, timeout_s=420
    )
    drill = Drill(settings, options)
    return asyncio.run(drill.run()), drill


def test_every_incident_recovers_through_its_sick_api_window(
    drill_run: tuple[DrillResult, Drill],
) -> None:
    result, drill = drill_run
    windows = {w.fault.answer: w for w in drill.fleet.kube_server.chaos.windows}
    assert set(windows) == set(KINDS)
    for kind, window in windows.items():
        assert sum(window.hits.values()) > 0, f"no request met the {kind} window"
    by_ns = {i.workflow_id.split("/")[1]: i for i in result.incidents}
    assert set(by_ns) == {namespace(k) for k in KINDS}
    for incident in by_ns.values():
        # "recovered-measures-kept" when the warm floor was still rebuilding at the end.
        assert incident.status == "COMPLETED", incident
        assert incident.outcome.startswith("recovered"), incident
    assert set(result.routed_after_deroute.values()) == {0}


def test_no_alert_is_lost_and_no_effect_is_applied_twice(
    drill_run: tuple[DrillResult, Drill],
) -> None:
    result, drill = drill_run
    assert drill.delivery_errors == []
    assert len(result.time_to_deroute_s) == 3
    assert all(seconds is not None for seconds in result.time_to_deroute_s.values())
    mutations = drill.fleet.kube_server.chaos.mutations
    assert mutations.applied_twice() == {}
    # The lost answers really were applied, and their retries found them done.
    lost = [m for m in mutations.entries if m.during == "timeout" and m.applied]
    assert lost, "no mutation was applied with its answer lost"
    assert result.duplicate_actions == 0
    assert (result.effects.duplicates, result.effects.orphans) == (0, 0)


def test_the_timeline_shows_each_kinds_retries_and_throttling_waits_its_retry_after(
    drill_run: tuple[DrillResult, Drill],
) -> None:
    result, drill = drill_run
    by_ns = reports(result)
    for kind in KINDS:
        # The status query (what an operator sees) and the report show the same retries.
        queried = drill.incidents[f"replica-loss/{namespace(kind)}/llm"]["status"]["timeline"]
        assert retries(queried) == retries(by_ns[namespace(kind)]["timeline"]), kind
    error, throttle, timeout = (retries(by_ns[namespace(k)]["timeline"]) for k in KINDS)
    assert error and all(": 500 Internal Server Error" in r["failure"] for r in error), error
    assert throttle and all(r["retry_in_s"] >= 3 for r in throttle), throttle
    assert all("429 Too Many Requests (retry after 3s)" in r["failure"] for r in throttle)
    assert timeout and all("ReadTimeoutError" in r["failure"] for r in timeout), timeout
    for report in by_ns.values():
        assert not any(r["final"] for r in retries(report["timeline"]))
    # The server saw throttled clients come back no sooner than Retry-After said.
    window = next(w for w in drill.fleet.kube_server.chaos.windows if w.fault.answer == "throttle")
    last: dict[tuple[str, str], float] = {}
    gaps = []
    for at, verb, ref in window.answered:
        if (verb, ref) in last:
            gaps.append(at - last[(verb, ref)])
        last[(verb, ref)] = at
    assert gaps and min(gaps) >= 2.9, gaps
