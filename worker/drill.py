"""`fleetmend drill` and `fleetmend demo`: a scenario end to end on the real stack.

Called from `worker/cli.py`. The drill runs the simulated fleet in this process (fleetsim:
Kubernetes API, replicas, router, traffic, faults), starts the real stack beside it
(`worker/stack.py`: PostgreSQL, the Temporal dev server, the worker and the intake as
child processes, the worker's kubeconfig pointing at fleetsim), plays the scenario's
fault script, and delivers each fault's alerts to the intake exactly as Alertmanager
would: a version-4 webhook notification with the bearer token. While fleetmend works it
shows the incidents' timelines and pending gates; at the end it reconciles the ledger
against the fleet, writes the incident reports and returns one result object
(`DrillResult`, the `--json` output).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field, SecretStr
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter

from fleetsim.clock import ScaledClock
from fleetsim.control import control_app
from fleetsim.faults import Alert, InjectedFault
from fleetsim.fleet import Fleet
from fleetsim.kube.rbac import Authorizer, RbacError, forbidden_message
from fleetsim.scenario import Scenario, load_scenario
from worker.drill_channel import IncidentChannel, Notification
from worker.drill_observe import Observer
from worker.settings import ENV_PREFIX, Settings
from worker.stack import Stack
from workflows.types import QUERY_STATUS, UPDATE_APPROVE, ApprovalInput, incident_workflow_id

DEFAULT_SCENARIO = "replica-lost"
AUTO_APPROVER = "fleetmend-drill (--auto-approve)"


class DrillError(RuntimeError):
    """The drill could not run (bad scenario, a component that did not start); one line."""


class DrillOptions(BaseModel):
    scenario: str = DEFAULT_SCENARIO
    speed: float = Field(1.0, ge=1, le=100)
    auto_approve: bool = False
    # The demo keeps the stack (and the Web UI) up after the drill; drills tear it down.
    keep_up: bool = False
    # Tests and CI run several drills: pick free ports instead of the configured ones.
    free_ports: bool = False
    timeout_s: float = Field(900.0, gt=0, description="wall-clock limit for the whole drill")
    # Fleet seconds to keep running after the last incident closed (traffic settles).
    settle_s: float = Field(5.0, ge=0)
    # False: incidents skip the gradual ramp (FLEETMEND_RAMP), the runbook's baseline.
    ramp: bool = True
    # The fleet's API server enforces deploy/rbac.yaml: the worker's token is its
    # ServiceAccount, and every request outside the manifest is refused (403) and counted.
    rbac: bool = False


class StepOutcome(BaseModel):
    step: str
    outcome: str
    duration_s: float | None


class IncidentOutcome(BaseModel):
    workflow_id: str
    incident_id: str = ""
    severity: str = "unknown"
    status: str
    outcome: str = ""
    common_causes: list[str] = Field(default_factory=list)
    steps: list[StepOutcome] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class Approval(BaseModel):
    incident: str
    gate: str
    kind: str
    approver: str
    decided_at_s: float


class EffectsSummary(BaseModel):
    applied: int = 0
    duplicates: int = 0
    orphans: int = 0
    drift: int = 0


class DrillResult(BaseModel):
    scenario: str
    speed: float
    wall_s: float
    incidents: list[IncidentOutcome]
    time_to_deroute_s: dict[str, float | None]
    routed_after_deroute: dict[str, int]
    time_to_warm_floor_s: dict[str, float | None]
    requests: dict[str, int]
    duplicate_actions: int
    effects: EffectsSummary
    approvals: list[Approval]
    report_paths: list[str]
    # What fleetmend posted to the incident channel (the drill's own webhook).
    notifications: list[Notification] = Field(default_factory=list)
    temporal_ui: str | None = None
    # With `rbac`: each request the API server refused, as its 403 message words it.
    forbidden: list[str] = Field(default_factory=list)


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_port() -> int:
    """A free port below the kernel's ephemeral range.

    A port from binding port 0 lies in that range, where every client connection of the
    stack (PostgreSQL, Temporal, fleetsim's probes) takes its local port: one of them can
    take the port before the child it was picked for binds it.
    """
    top = _ephemeral_start()
    for _ in range(50):
        port = secrets.randbelow(max(1, top - 20000)) + 20000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _fingerprint(labels: dict[str, str]) -> str:
    blob = json.dumps(sorted(labels.items()), separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def webhook_payload(alerts: list[dict[str, Any]], *, receiver: str = "fleetmend") -> dict[str, Any]:
    """A version-4 notification for one alert group, as Alertmanager renders it."""
    group_labels = {"alertname": alerts[0]["labels"].get("alertname", "")}
    common = dict(alerts[0]["labels"])
    for alert in alerts[1:]:
        common = {k: v for k, v in common.items() if alert["labels"].get(k) == v}
    return {
        "version": "4",
        "groupKey": "{}:" + json.dumps(group_labels, sort_keys=True),
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://fleetsim.invalid/alertmanager",
        "alerts": [
            {
                "status": "firing",
                "labels": a["labels"],
                "annotations": a.get("annotations", {}),
                "startsAt": a["startsAt"],
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://fleetsim.invalid/graph",
                "fingerprint": _fingerprint(a["labels"]),
            }
            for a in alerts
        ],
    }


class Drill:
    def __init__(
        self,
        settings: Settings,
        options: DrillOptions,
        *,
        on_progress: Callable[[Drill], None] | None = None,
    ) -> None:
        self.options = options
        try:
            self.scenario: Scenario = load_scenario(options.scenario)
        except ValueError as exc:
            raise DrillError(str(exc)) from None
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        self.run_dir = (settings.state_dir / "drills" / f"{self.scenario.name}-{stamp}").resolve()
        self.base_settings = settings
        self.on_progress = on_progress
        self.clock = ScaledClock(options.speed)
        kube_token = secrets.token_urlsafe(16)
        try:
            self.authorizer = Authorizer.for_service_account(kube_token) if options.rbac else None
        except RbacError as exc:
            raise DrillError(str(exc)) from None
        self.fleet = Fleet(
            self.scenario,
            clock=self.clock,
            kube_token=kube_token,
            kube_authorizer=self.authorizer,
        )
        self.observer = Observer(self.fleet)
        self.channel = IncidentChannel()
        self.channel_url: str | None = None
        self.stack: Stack | None = None
        self.control_url: str | None = None
        self.client: Client | None = None
        self.token = secrets.token_urlsafe(24)
        self.incidents: dict[str, dict[str, Any]] = {}
        self.approvals: list[Approval] = []
        self.delivery_errors: list[str] = []
        # The injected faults' alert rules (with the fault's time) not done firing: a node
        # inside its grace, a rollout whose pods may still start crash-looping.
        self._rules: list[tuple[float, Alert]] = []
        self._sent: set[str] = set()
        self._posted = 0
        self._started_wall = time.monotonic()

    # --- set-up ------------------------------------------------------------------------

    def _stack_settings(self, kubeconfig: Path, router_metrics_url: str) -> Settings:
        update: dict[str, Any] = {
            "state_dir": self.run_dir,
            "kubeconfig": kubeconfig,
            # The in-flight step reads the router's per-replica retried/terminated counts.
            "router_metrics_url": router_metrics_url,
            "intake_token": SecretStr(self.token),
            # The incident's own waits follow the fleet's clock.
            "time_scale": max(1.0, self.options.speed),
            "ramp": self.options.ramp,
        }
        if self.channel_url is not None:
            update["notify_webhook_url"] = self.channel_url
        if self.options.free_ports:
            update |= {
                "temporal_address": f"127.0.0.1:{_free_port()}",
                "temporal_ui_port": _free_port(),
                "intake_port": _free_port(),
            }
        return self.base_settings.model_copy(update=update)

    async def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        await self.fleet.start()
        host, port = await self.fleet.host.serve("127.0.0.1", 0, self.channel.app())
        self.channel_url = f"http://{host}:{port}{self.channel.path}"
        kubeconfig = self.fleet.write_kubeconfig(self.run_dir / "kubeconfig")
        # Closed with the fleet's other listeners in `Fleet.stop`.
        ip, port = await self.fleet.host.serve("127.0.0.1", 0, control_app(self.fleet))
        self.control_url = f"http://{ip}:{port}"
        self.stack = Stack(
            self._stack_settings(kubeconfig, f"{self.control_url}/metrics"),
            ui=self.options.keep_up,
        )
        if self.options.free_ports:
            # The worker's health server too: another stack on the machine may hold 8081.
            self.stack.extra_env[f"{ENV_PREFIX}WORKER_HEALTH_PORT"] = "0"
        await asyncio.to_thread(self.stack.start)
        settings = self.stack.settings
        self.client = await Client.connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            data_converter=pydantic_data_converter,
        )
        await self._wait_for_intake()

    async def _wait_for_intake(self, timeout_s: float = 60.0) -> None:
        assert self.stack is not None
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as http:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    resp = await http.get(
                        f"{self.stack.intake_url}/readyz",
                        headers={"Authorization": f"Bearer {self.token}"},
                    )
                    if resp.status_code == 200:
                        return
                dead = self.stack.dead_children()
                if dead:
                    raise DrillError(
                        f"{dead[0].name} exited while starting; see {dead[0].log_path}, "
                        f"which ends:\n{log_tail(dead[0].log_path)}"
                    )
                await asyncio.sleep(0.2)
        raise DrillError(f"the intake did not become ready within {timeout_s:.0f}s")

    # --- the run -----------------------------------------------------------------------

    async def run(self) -> DrillResult:
        try:
            await self.start()
            await self._play()
            return await self._finish()
        finally:
            await self.close()

    async def _play(self) -> None:
        assert self.stack is not None
        script = self.fleet.start_script()
        delivered = 0
        deadline = time.monotonic() + self.options.timeout_s
        settled_at: float | None = None
        async with httpx.AsyncClient(timeout=10.0) as http:
            while time.monotonic() < deadline:
                while delivered < len(self.fleet.injected):
                    self._track(self.fleet.injected[delivered])
                    delivered += 1
                await self._deliver_firing(http)
                self.observer.tick()
                await self._poll_incidents()
                if self.on_progress is not None:
                    self.on_progress(self)
                dead = self.stack.dead_children()
                if dead:
                    raise DrillError(f"{dead[0].name} exited mid-drill; see {dead[0].log_path}")
                if script.done() and not self._awaited() and self.incidents and self._all_closed():
                    settled_at = settled_at or self.fleet.now()
                    if self.fleet.now() - settled_at >= self.options.settle_s:
                        return
                elif script.done() and not self.fleet.injected:
                    return
                await asyncio.sleep(0.05)
        raise DrillError(
            f"the drill did not finish within {self.options.timeout_s:.0f}s wall time; "
            f"open incidents: {', '.join(k for k, v in self.incidents.items() if not v.get('closed'))}"
        )

    def _track(self, fault: InjectedFault) -> None:
        """Its alerts go out once their rules fire; what they name is then followed.

        The lost endpoints are the pods the alerts name: for a lost rank that is the
        group's leader (a worker has no endpoint of its own; the group leaves with it).
        """
        self._rules += [(fault.at, alert) for alert in fault.alerts]
        if not any(a.labels.get("pod") or a.per_crash_looping_pod for a in fault.alerts):
            for pod_ref in fault.pods:
                namespace, _, pod = pod_ref.partition("/")
                self.observer.track(namespace, fault.fault.target.pool or "", pod, fault.at)

    def _awaited(self) -> bool:
        """An alert that will still fire once (a node inside its grace)."""
        return any(not rule.per_crash_looping_pod for _, rule in self._rules)

    async def _deliver_firing(self, http: httpx.AsyncClient) -> None:
        """Post every alert whose rule fires by now and was not posted yet, as Alertmanager
        would: one notification per pool group."""
        firing: list[Alert] = []
        pending: list[tuple[float, Alert]] = []
        for fault_at, rule in self._rules:
            fired = self.fleet.firing(rule)
            if not fired or rule.per_crash_looping_pod:
                pending.append((fault_at, rule))
            for alert in fired:
                key = _fingerprint(alert.labels)
                if key in self._sent:
                    continue
                self._sent.add(key)
                firing.append(alert)
                labels = alert.labels
                if labels.get("pod"):
                    self.observer.track(
                        labels.get("namespace", ""), labels.get("pool", ""), labels["pod"], fault_at
                    )
        self._rules = pending
        if firing:
            await self._deliver(http, firing)

    async def _deliver(self, http: httpx.AsyncClient, firing: list[Alert]) -> None:
        assert self.stack is not None
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for alert in firing:
            key = (alert.labels.get("namespace", ""), alert.labels.get("pool", ""))
            groups.setdefault(key, []).append(alert.to_alertmanager())
        for (namespace, pool), alerts in groups.items():
            error = await self._post(http, webhook_payload(alerts))
            if error is not None:
                self.delivery_errors.append(f"{namespace}/{pool}: {error}")
                continue
            self._posted += len(alerts)
            now = self.fleet.now()
            for posted in alerts:
                pod = posted["labels"].get("pod")
                if pod:
                    self.observer.alert_received(namespace, pod, now)
                    continue
                for lost in self.observer.lost.values():
                    if (lost.namespace, lost.pool) == (namespace, pool):
                        self.observer.alert_received(namespace, lost.pod, now)
            self.incidents.setdefault(incident_workflow_id(namespace, pool), {})

    async def _post(self, http: httpx.AsyncClient, payload: dict[str, Any]) -> str | None:
        """POST like Alertmanager: retry a 5xx or a refused connection, never a 4xx."""
        assert self.stack is not None
        error = "not sent"
        for attempt in range(6):
            try:
                resp = await http.post(
                    f"{self.stack.intake_url}/alertmanager",
                    json=payload,
                    headers={"Authorization": f"Bearer {self.token}"},
                )
            except httpx.HTTPError as exc:
                error = type(exc).__name__
            else:
                if resp.status_code < 300:
                    return None
                error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                if resp.status_code < 500:
                    return error
            await asyncio.sleep(0.25 * 2**attempt)
        return error

    async def _poll_incidents(self) -> None:
        assert self.client is not None
        for workflow_id, info in self.incidents.items():
            if info.get("closed"):
                continue
            handle = self.client.get_workflow_handle(workflow_id)
            try:
                status = await handle.query(QUERY_STATUS)
            except Exception:  # not started yet, or between runs: the next tick asks again
                with contextlib.suppress(Exception):
                    desc = await handle.describe()
                    if desc.status not in (None, WorkflowExecutionStatus.RUNNING):
                        info["closed"] = True
                        info["execution"] = desc.status.name if desc.status else "?"
                continue
            if hasattr(status, "model_dump"):
                status = status.model_dump(mode="json")
            info["status"] = status
            if self.options.auto_approve:
                await self._approve_pending(workflow_id, status)
            if status.get("outcome", "open") != "open" or status.get("step") == "closed":
                desc = await handle.describe()
                if desc.status != WorkflowExecutionStatus.RUNNING:
                    info["closed"] = True
                    info["execution"] = desc.status.name if desc.status else "?"

    async def _approve_pending(self, workflow_id: str, status: dict[str, Any]) -> None:
        assert self.client is not None
        handle = self.client.get_workflow_handle(workflow_id)
        for gate in status.get("pending_gates", []):
            name = gate.get("gate") or gate.get("name")
            if not name or any(
                a.gate == name and a.incident == workflow_id for a in self.approvals
            ):
                continue
            decision = ApprovalInput(
                gate=name, approver=AUTO_APPROVER, approve=True, reason="unattended drill"
            )
            try:
                await handle.execute_update(UPDATE_APPROVE, decision)
            except Exception:  # already decided or timed out meanwhile: the timeline says
                continue
            self.approvals.append(
                Approval(
                    incident=workflow_id,
                    gate=name,
                    kind=str(gate.get("kind", "")),
                    approver=AUTO_APPROVER,
                    decided_at_s=round(self.fleet.now(), 3),
                )
            )

    def _all_closed(self) -> bool:
        return all(info.get("closed") for info in self.incidents.values())

    # --- results -----------------------------------------------------------------------

    async def _finish(self) -> DrillResult:
        from worker.drill_results import collect_results

        return await collect_results(self)

    async def close(self) -> None:
        if self.stack is not None and not self.options.keep_up:
            await asyncio.to_thread(self.stack.stop)
        await self.fleet.stop()

    def forbidden(self) -> list[str]:
        """Every request the API server refused under `rbac`, in its own 403 wording."""
        denied = self.authorizer.denied if self.authorizer is not None else []
        return [forbidden_message(r) for r in denied]

    def elapsed_wall(self) -> float:
        return time.monotonic() - self._started_wall


async def run_drill(
    settings: Settings,
    options: DrillOptions,
    *,
    on_progress: Callable[[Drill], None] | None = None,
) -> tuple[DrillResult, Drill]:
    drill = Drill(settings, options, on_progress=on_progress)
    result = await drill.run()
    return result, drill


def log_tail(path: Path | str, limit: int = 2000) -> str:
    """The end of a child's log: its last words are why it exited, and a drill's state
    directory (logs included) may be gone by the time anyone reads the error."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return f"(unreadable: {exc})"
    return data[-limit:].decode("utf-8", "replace")
