"""An incident survives its worker being SIGKILLed in every read-only step and while it
posts to the incident channel, run under the worker's least-privilege RBAC, and no secret
leaks into a log, a report or the status query.

One `replica-lost` drill on the real stack (`tests/faults/read_chaos.py`): the first time
each read-only activity type runs, the worker is SIGKILLed mid-activity and a new one
started; Temporal retries the read on it once the dead worker's heartbeat or start-to-close
timeout runs out. The first message to the incident channel is held unread while the
worker dies, the second is delivered and its 2xx held: each must reach the channel once. fleetsim's API server enforces `deploy/rbac.yaml` for the worker's token
(the drill's `rbac` option), and the ledger is a PostgreSQL database whose role must log in
with a recognisable password. The drill runs once for the module; each test reads one
property of it.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio
from psycopg import sql
from sqlalchemy.engine import make_url

from fleetsim.kube.chaos import ApiFault, Verb
from tests.drills.checks import files_holding
from tests.faults.gated_reads import Reads
from tests.faults.kill_checks import (
    assert_each_completed_on_a_later_attempt,
    assert_each_message_reached_the_channel_once,
    assert_each_write_applied_once,
    assert_killed_as_planned,
    timeline_retries,
)
from tests.faults.read_chaos import ReadChaosDrill, ReadFault
from worker.drill import DrillOptions, DrillResult
from worker.postgres import libpq_uri
from worker.settings import load_settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SPEED = 20.0
INCIDENT = "replica-loss/serving/inference-llm"


def hang_first(verb: Verb, resource: str) -> ApiFault:
    """Hang the first such request in `serving` until the worker is killed (then closed)."""
    return ApiFault(
        answer="timeout",
        verbs=[verb],
        resources=[resource],
        namespaces=["serving"],
        hang_s=60,
        for_wall_s=300,
    )


# The read-only activities of a warm-spare recovery, and its notifications. assess_loss
# and read_routing_state make a few quick Kubernetes reads: each one's first request is
# one nothing before it makes (the pool's pod list: assess_loss is the incident's first
# activity; the Service: read_routing_state reads it before deroute does), hung in
# fleetsim so the worker dies inside it. The other quick reads make requests earlier
# steps make too (a pod by name, the pool's Deployment, the pool's pod list): each such
# read is held at its gate until the watcher has seen which activity is running.
# (estimate_lead_time runs only when no warm spare is left: drill_provision_kills.py,
# `make provision-kills`, outside CI.)
PLAN = [
    ReadFault("assess_loss", hang_first("list", "pods")),
    ReadFault("read_routing_state", hang_first("get", "services")),
    ReadFault("read_pressure"),
    ReadFault("read_replica_rates"),
    ReadFault("find_replacements", gate=Reads("list", "pods")),
    ReadFault("warm_up_replica"),
    ReadFault("find_warm_workload", gate=Reads("get", "pods")),
    ReadFault("diagnose_pending", gate=Reads("list", "pods")),
    ReadFault("verify_capacity", gate=Reads("get", "deployments")),
    ReadFault("verify_serving"),
    ReadFault("notify_incident_channel", post="drop", label="notify, post dropped"),
    ReadFault("notify_incident_channel", post="lose-reply", label="notify, reply lost"),
]
KILLED = {f.key for f in PLAN}
GATED = {f.key: f.gate for f in PLAN if f.gate is not None}
# Local activities from `deroute-first` on: the workflow task that ran them is retried.
LOCAL = {"assess_loss", "read_routing_state"}


@dataclass(frozen=True)
class Ledger:
    url: str
    password: str


@pytest.fixture(scope="module")
def ledger_with_password(pg_admin_url: str) -> Iterator[Ledger]:
    """A database owned by a role that must give its password, even on the local socket."""
    suffix = secrets.token_hex(4)
    role = database = f"fleetmend_drill_{suffix}"
    password = f"Recognisable-Pw-{secrets.token_hex(8)}"
    admin = libpq_uri(pg_admin_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(database), sql.Identifier(role)
            )
        )
        row = conn.execute("SHOW hba_file").fetchone()
        assert row is not None
        hba = Path(row[0])
        original = hba.read_text()
        # First match wins: this role authenticates with its password, everyone else as before.
        hba.write_text(f"local {database} {role} scram-sha-256\n" + original)
        conn.execute("SELECT pg_reload_conf()")
    url = make_url(pg_admin_url).set(username=role, password=password, database=database)
    try:
        yield Ledger(url.render_as_string(hide_password=False), password)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            hba.write_text(original)
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
            )
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


class Run:
    def __init__(self, drill: ReadChaosDrill, result: DrillResult, ledger: Ledger) -> None:
        self.drill = drill
        self.result = result
        self.ledger = ledger
        self.status = drill.final_status[INCIDENT]
        self.activities = drill.activity_runs[INCIDENT]
        self.writes = drill.fleet.kube_server.mutations.summary()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def run(ledger_with_password: Ledger) -> AsyncIterator[Run]:
    options = DrillOptions(
        scenario="replica-lost",
        speed=SPEED,
        free_ports=True,
        auto_approve=True,
        timeout_s=420,
        rbac=True,
    )
    state_dir = Path(tempfile.mkdtemp(prefix="fleetmend-read-faults-"))
    settings = load_settings(state_dir=state_dir, database_url=ledger_with_password.url)
    drill = ReadChaosDrill(settings, options, plan=PLAN)
    try:
        yield Run(drill, await drill.run(), ledger_with_password)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def test_the_worker_was_killed_while_each_planned_activity_ran(run: Run) -> None:
    assert_killed_as_planned(run.drill, PLAN)


def test_a_gated_read_was_killed_while_its_own_request_was_held(run: Run) -> None:
    held = {k.fault.key: k.detail.get("held_read", "") for k in run.drill.killed}
    assert {key: held[key].split(" ", 1)[0] for key in GATED} == {
        key: gate.resource for key, gate in GATED.items()
    }
    assert held["verify_capacity"] == "deployments serving/inference-llm"


def test_the_incident_completes_and_recovers(run: Run) -> None:
    (incident,) = run.result.incidents
    assert (incident.status, incident.outcome) == ("COMPLETED", "recovered")
    assert set(run.result.routed_after_deroute.values()) == {0}


def test_the_history_shows_each_killed_activity_completed_on_a_later_attempt(run: Run) -> None:
    assert_each_completed_on_a_later_attempt(run.drill, INCIDENT, KILLED - LOCAL)


def test_a_killed_local_read_ran_again_on_the_new_worker_after_its_task_timed_out(
    run: Run,
) -> None:
    killed_at = {k.fault.activity: k.detail["killed_at"] for k in run.drill.killed}
    local = run.drill.local_runs[INCIDENT]
    for name in LOCAL:
        # The dead worker never reported it: its only completion is the new worker's.
        assert [r.completed_at > killed_at[name] for r in local if r.activity == name][:1] == [True]
    assert run.drill.workflow_tasks_timed_out[INCIDENT] >= 1


def test_the_timeline_shows_each_killed_activity_retried(run: Run) -> None:
    assert timeline_retries(run.status) >= {f.activity for f in PLAN} - LOCAL


def test_no_effect_was_applied_twice(run: Run) -> None:
    assert_each_write_applied_once(run.writes, run.result)


def test_each_message_reached_the_incident_channel_once(run: Run) -> None:
    assert_each_message_reached_the_channel_once(run.drill)
    assert [p.key.rsplit("/", 1)[-1] for p in run.drill.held_channel.held] == [
        "severity",
        "recovered",
    ]


def test_the_worker_needed_nothing_outside_its_rbac(run: Run) -> None:
    assert run.drill.authorizer is not None
    assert run.drill.forbidden_during_incident == []


def test_the_api_server_refused_the_workers_token_a_verb_outside_its_rbac(run: Run) -> None:
    assert run.drill.probe is not None
    status, message = run.drill.probe
    assert status == 403
    assert message.startswith('namespaces is forbidden: User "system:serviceaccount:fleetmend:')
    assert 'cannot list resource "namespaces"' in message
    assert run.result.forbidden == [message]


def test_the_ledgers_role_really_needs_its_password(run: Run) -> None:
    wrong = make_url(run.ledger.url).set(password="not-" + run.ledger.password)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(libpq_uri(wrong.render_as_string(hide_password=False))).close()


def test_no_secret_reaches_a_log_a_report_or_the_status_query(run: Run) -> None:
    found = {
        "database password": run.ledger.password,
        "intake token": run.drill.token,
        "kube token": str(run.drill.fleet.kube_token),
    }
    logs = list((run.drill.run_dir / "logs").glob("*"))
    assert logs and all(p.stat().st_size > 0 for p in logs if p.name.startswith("worker"))
    assert run.result.report_paths
    assert files_holding(run.drill.run_dir, found, allowed={"kubeconfig"}) == []
    status = run.status.model_dump_json()
    assert "timeline" in status and [n for n, v in found.items() if v in status] == []
