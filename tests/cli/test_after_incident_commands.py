"""`fleetmend reconcile` and `fleetmend report` as real processes, on PostgreSQL and Temporal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.store import Ledger
from tests.cli.test_operator_commands import OpenIncident, fleetmend, open_incident  # noqa: F401
from worker.settings import load_settings

STAMP_INCIDENT = "replica-loss/llm/dup-pool@20261129T080000Z"


@pytest.fixture
def ledger(database_url: str) -> Iterator[Ledger]:
    store = Ledger.connect(database_url, pool_size=2)
    try:
        yield store
    finally:
        store.close()


def apply(ledger: Ledger, incident: str, op_id: str, target: str = "llm/pod/p-1") -> None:
    ledger.run_once(
        {
            "op_id": op_id,
            "incident_id": incident,
            "kind": "label-pod",
            "target": target,
            "intent": {"serving": "false"},
        },
        apply=lambda _op: {"labelled": True},
    )


def db_env(database_url: str) -> dict[str, str]:
    # The CLI reads the same URL the fixture made, through the settings validator.
    return {"FLEETMEND_DATABASE_URL": load_settings(database_url=database_url).database_url or ""}


async def test_reconcile_reports_a_duplicate_effect_once(ledger: Ledger, database_url: str) -> None:
    apply(ledger, STAMP_INCIDENT, f"{STAMP_INCIDENT}/deroute/p-1")
    apply(ledger, STAMP_INCIDENT, f"{STAMP_INCIDENT}/deroute/p-1/again")
    env = db_env(database_url)
    first = await fleetmend("reconcile", STAMP_INCIDENT, env=env)
    assert first.code == 0, first.err
    assert "1 finding(s)" in first.out
    assert "duplicate" in first.out
    second = await fleetmend("reconcile", STAMP_INCIDENT, env=env)
    assert second.code == 0, second.err
    assert "no duplicates, orphans or drift" in second.out


async def test_reconcile_of_a_clean_incident_says_so(ledger: Ledger, database_url: str) -> None:
    clean = "replica-loss/llm/clean@20261129T090000Z"
    apply(ledger, clean, f"{clean}/deroute/p-1")
    run = await fleetmend("reconcile", clean, env=db_env(database_url))
    assert run.code == 0, run.err
    assert f"{clean}: no duplicates, orphans or drift" in run.out


async def test_reconcile_without_a_database_is_one_line() -> None:
    run = await fleetmend("reconcile", env={})
    assert run.code == 1
    assert run.err.strip() == (
        "fleetmend: FLEETMEND_DATABASE_URL is not set: reconciliation reads the ledger"
    )


async def test_report_joins_the_workflow_timeline_with_the_ledger_effects(
    open_incident: OpenIncident,  # noqa: F811
    ledger: Ledger,
    database_url: str,
    tmp_path: Path,
) -> None:
    incident = "inc-20261129-0800"  # the sample workflow's incident id
    apply(ledger, incident, f"{incident}/deroute/p-1")
    env = {**open_incident.env, **db_env(database_url)}
    run = await fleetmend(
        "report", open_incident.workflow_id, "--format", "json", "--out", str(tmp_path), env=env
    )
    assert run.code == 0, run.err
    path = Path(run.out.strip())
    assert path.parent == tmp_path
    report = json.loads(path.read_text())
    assert report["incident_id"] == incident
    assert report["pool"] == open_incident.workflow_id.rsplit("/", 1)[1]
    assert [row["step"] for row in report["timeline"]] == ["assess", "deroute"]
    assert [e["op_id"] for e in report["effects"]] == [f"{incident}/deroute/p-1"]
    assert report["effects"][0]["state"] in ("applied", "confirmed")
    assert report["summary"]["severity"] == "degraded"

    markdown = await fleetmend(
        "report", open_incident.workflow_id, "--format", "md", "--out", str(tmp_path), env=env
    )
    assert markdown.code == 0, markdown.err
    assert "deroute" in Path(markdown.out.strip()).read_text()


async def test_report_refuses_an_unknown_format_in_one_line() -> None:
    run = await fleetmend("report", "llm/pool", "--format", "pdf", env={})
    assert run.code == 1
    assert run.err.strip() == "fleetmend: --format must be md, html or json, not 'pdf'"


async def test_db_upgrade_brings_the_ledger_to_head_and_is_idempotent(database_url: str) -> None:
    env = db_env(database_url)
    first = await fleetmend("db", "upgrade", env=env)
    again = await fleetmend("db", "upgrade", env=env)
    assert (first.code, again.code) == (0, 0), first.err + again.err
    assert again.out.strip() == "ledger schema at head"


async def test_db_upgrade_against_an_unreachable_database_is_one_line() -> None:
    run = await fleetmend(
        "db",
        "upgrade",
        env={"FLEETMEND_DATABASE_URL": "postgresql+psycopg://u:p@127.0.0.1:1/none"},
    )
    assert run.code == 1
    assert "Traceback" not in run.err
    assert run.err.startswith("fleetmend: db upgrade failed: OperationalError")
    assert len(run.err.strip().splitlines()) == 1
