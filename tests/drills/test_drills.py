"""Shipped scenarios as drills on the real stack, with assertions on their outcome.

Each test runs `fleetmend drill` in-process: fleetsim here, and the embedded PostgreSQL,
the Temporal dev server, the worker and the intake as child processes. The fleet runs 20x
faster than the wall clock and the incident's own waits are scaled to match; fleetmend's
reactions run at real speed. Every other shipped scenario runs with `make drills`.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worker.drill import Drill, DrillOptions, DrillResult
from worker.settings import load_settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SPEED = 20.0


async def drill(scenario: str, state_dir: Path, **settings: Any) -> DrillResult:
    return (await drill_and_run(scenario, state_dir, **settings))[0]


async def drill_and_run(
    scenario: str, state_dir: Path, **settings: Any
) -> tuple[DrillResult, Drill]:
    options = DrillOptions(
        scenario=scenario, speed=SPEED, free_ports=True, auto_approve=True, timeout_s=420
    )
    run = Drill(load_settings(state_dir=state_dir, **settings), options)
    return await run.run(), run


@contextlib.contextmanager
def incident_channel() -> Iterator[tuple[int, list[bytes]]]:
    """A webhook receiver on a free port: (its port, every body posted to it), answered 200."""
    posts: list[bytes] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posts.append(self.rfile.read(int(self.headers.get("content-length") or 0)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:  # stderr is not for the test's output
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1]), posts
    finally:
        server.shutdown()
        server.server_close()


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


def report_of(result: DrillResult) -> dict[str, Any]:
    assert len(result.report_paths) == 1
    return json.loads(Path(result.report_paths[0]).with_suffix(".json").read_text())


def assert_dead_endpoints_out_and_never_routed_again(result: DrillResult) -> None:
    assert result.time_to_deroute_s, "the drill lost no replica"
    assert all(seconds is not None for seconds in result.time_to_deroute_s.values())
    assert set(result.routed_after_deroute.values()) == {0}


async def test_replica_lost_recovers_exactly_once_and_restores_the_warm_floor(
    tmp_path: Path,
) -> None:
    with incident_channel() as (port, posts):
        # The channel's credentials sit in the URL, as in a Slack-style webhook.
        hook = f"http://fleet:hook-pass-7f3a@127.0.0.1:{port}/services/T0/hook-path-91c2"
        result, run = await drill_and_run("replica-lost", tmp_path, notify_webhook_url=hook)

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
    report = report_of(result)
    verify = [e for e in report["timeline"] if e["step"] == "verify"][-1]
    assert verify["evidence"]["checks"]["warm-floor-restored"]["passed"] is True
    # The report carries the drill's own numbers.
    assert report["summary"]["switch_s"] == max(result.time_to_deroute_s.values())
    assert report["summary_table"]["Duplicates"] == "0"
    assert Path(result.report_paths[0]).read_text().count("data:image/png;base64,") == 1
    # No secret reaches a log, a report, the ledger's or Temporal's files, or the status query.
    secrets = {
        "intake token": run.token,
        "kube token": str(run.fleet.kube_token),
        "webhook password": "hook-pass-7f3a",
        "webhook path": "hook-path-91c2",
    }
    assert posts, "the incident channel got no message"
    assert files_holding(run.run_dir, secrets, allowed={"kubeconfig"}) == []
    statuses = json.dumps([info.get("status") for info in run.incidents.values()], default=str)
    assert "timeline" in statuses and not [n for n, v in secrets.items() if v in statuses]
    # The worker read the router's per-replica counts from fleetsim's /metrics.
    inflight = [e for e in report["timeline"] if e["step"] == "inflight"][-1]["evidence"]
    assert inflight["counts_available"] is True
    lost = {ref.partition("/")[2] for ref in result.time_to_deroute_s}
    assert set(inflight["per_replica"]) == lost


async def test_rack_outage_is_an_outage_and_stops_at_the_blast_radius_until_approved(
    tmp_path: Path,
) -> None:
    result = await drill("rack-outage", tmp_path)

    (incident,) = result.incidents
    assert incident.severity == "outage"
    assert_dead_endpoints_out_and_never_routed_again(result)
    assert len(result.time_to_deroute_s) == 3
    gates = {a.kind for a in result.approvals}
    assert "blast-radius" in gates
    report = report_of(result)
    beyond = [
        e for e in report["timeline"] if e["step"] == "blast-radius" and e["outcome"] == "beyond"
    ]
    assert beyond, "automatic derouting did not stop at the blast-radius limit"
    assert beyond[0]["evidence"]["limit"] == 0.25
    assert (result.effects.duplicates, result.effects.orphans) == (0, 0)
