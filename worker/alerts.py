"""Alertmanager's webhook payload (version 4) and the label mapping to a lost replica.

Called from `worker/intake.py` for every `POST /alertmanager`: the envelope is validated
first, then each alert on its own, so one bad alert never takes the good alerts of the
same batch down with it (Alertmanager does not retry a 4xx, it would drop them all).

The label mapping (documented in `worker/INTAKE.md`, configurable through
`FLEETMEND_INTAKE_MAP_*` variables or a YAML file named by `FLEETMEND_INTAKE_MAP_FILE`):

| field     | labels tried, first non-empty wins                       | required |
|-----------|----------------------------------------------------------|----------|
| namespace | `namespace`                                              | yes      |
| pool      | `pool`, `service`, `deployment`, `leaderworkerset`       | yes      |
| pod       | `pod`                                                    | no       |
| node      | `node`, `instance` (a `:port` suffix is dropped)         | no       |
| fault     | `fault`, else derived from `alertname` (table below)     | no       |
| dry run   | `fleetmend_dry_run="true"`                               | no       |

The models ignore unknown fields, so keys a newer Alertmanager adds (`routeLabels`,
`notification_reason`, ...) pass through.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    SettingsConfigDict,
    SettingsError as PydanticSettingsError,
)

from workflows.types import AlertResolved, FaultKind, LostReplica

FAULT_KINDS: frozenset[str] = frozenset(get_args(FaultKind))

# Kubernetes name rules: a namespace is an RFC 1123 label, other objects RFC 1123 subdomains.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

# Ordered: the first pattern found (case-insensitively) in the alertname gives the fault.
# "NodeNotReady" is tested before "NotReady" so a node alert never reads as a pod alert.
DEFAULT_FAULT_BY_ALERTNAME: list[tuple[str, FaultKind]] = [
    ("xid", "gpu-xid"),
    ("ecc", "gpu-ecc"),
    ("nodenotready", "node-not-ready"),
    ("oomkill", "pod-oom-killed"),
    ("evict", "pod-evicted"),
    ("crashloop", "pod-crashloop"),
    ("ranklost", "rank-lost"),
    ("endpoint", "endpoint-dropped"),
    ("notraffic", "no-traffic"),
    ("notready", "pod-not-ready"),
]


class LabelMapping(BaseSettings):
    """Which alert labels name the replica. Env: FLEETMEND_INTAKE_MAP_<FIELD> (JSON lists)."""

    model_config = SettingsConfigDict(env_prefix="FLEETMEND_INTAKE_MAP_", extra="ignore")

    namespace: list[str] = Field(default_factory=lambda: ["namespace"])
    pool: list[str] = Field(
        default_factory=lambda: ["pool", "service", "deployment", "leaderworkerset"]
    )
    pod: list[str] = Field(default_factory=lambda: ["pod"])
    node: list[str] = Field(default_factory=lambda: ["node", "instance"])
    fault: list[str] = Field(default_factory=lambda: ["fault"])
    dry_run: str = "fleetmend_dry_run"
    fault_by_alertname: list[tuple[str, FaultKind]] = Field(
        default_factory=lambda: list(DEFAULT_FAULT_BY_ALERTNAME)
    )
    file: Path | None = Field(
        None, description="YAML file with the same keys; its values win over the defaults."
    )

    @classmethod
    def load(cls) -> LabelMapping:
        """From the environment, then the YAML file it names; ValueError names the culprit."""
        try:
            mapping = cls()
        except PydanticSettingsError as exc:
            # pydantic-settings names the field but not the variable the operator set.
            found = re.search(r'field "(\w+)"', str(exc))
            name = f"FLEETMEND_INTAKE_MAP_{found.group(1).upper()}" if found else "mapping"
            raise ValueError(f'{name}: expected JSON, e.g. \'["pool", "service"]\'') from exc
        if mapping.file is None:
            return mapping
        try:
            data = yaml.safe_load(mapping.file.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"{mapping.file}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{mapping.file}: expected a mapping of field -> labels")
        try:
            return cls.model_validate({**mapping.model_dump(exclude={"file"}), **data})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ValueError(f"{mapping.file}: {where}: {err['msg']}") from exc


# Alertmanager writes Go's RFC 3339 with up to nanoseconds; pydantic alone would also take
# a bare date or a number, which no Alertmanager sends and which would make a new dedupe key.
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")


def _rfc3339(value: Any) -> Any:
    if value is None:
        return value
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise ValueError("expected an RFC 3339 timestamp like 2026-11-29T08:00:00Z")
    return value


class AlertmanagerAlert(BaseModel):
    """One alert of a notification, as Alertmanager's `template.Alert` serialises it."""

    model_config = ConfigDict(extra="ignore")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: str = ""
    # Alertmanager's are 16 hex digits; the bound keeps the signal payload small.
    fingerprint: str = Field("", max_length=128)

    _timestamps = field_validator("startsAt", "endsAt", mode="before")(_rfc3339)


class AlertmanagerWebhook(BaseModel):
    """The notification envelope, payload version 4 (Alertmanager 0.x up to today)."""

    model_config = ConfigDict(extra="ignore")

    version: Literal["4"]
    groupKey: str
    truncatedAlerts: int = Field(0, ge=0)
    status: Literal["firing", "resolved"]
    receiver: str
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[AlertmanagerAlert]


class WebhookEnvelope(AlertmanagerWebhook):
    """The envelope with its alerts unparsed, so each alert is validated on its own."""

    alerts: list[Any]  # type: ignore[assignment]


# Alertmanager's max_alerts is unbounded by default; past this bound one request would hold
# the intake for minutes, so the rest of the group is rejected alert by alert (never the
# whole notification: its first alerts still start the pool's incident).
MAX_ALERTS_PER_REQUEST = 1000


def over_limit(index: int) -> AlertRejected:
    return AlertRejected(
        index=index,
        field=f"alerts.{index}",
        reason="over_limit",
        message=(
            f"only the first {MAX_ALERTS_PER_REQUEST} alerts of a notification are read; "
            f"set max_alerts <= {MAX_ALERTS_PER_REQUEST} in the webhook receiver"
        ),
    )


MAX_LABELS_BYTES = 64 * 1024
MAX_POOL_CHARS = 63


class AlertRejected(BaseModel):
    """Why one alert of a batch was not accepted; `field` names the offending field."""

    index: int
    field: str
    reason: str
    message: str
    fingerprint: str = ""


class MappedFiring(BaseModel):
    index: int
    lost: LostReplica

    @property
    def dedupe_key(self) -> str:
        return dedupe_key(self.lost.fingerprint, self.lost.starts_at)


class MappedResolved(BaseModel):
    index: int
    resolved: AlertResolved


Mapped = MappedFiring | MappedResolved | AlertRejected


def dedupe_key(fingerprint: str, starts_at: datetime | None) -> str:
    """One alert instance: a resend (retry, HA peer, repeat_interval) carries the same key."""
    shown = starts_at.isoformat() if starts_at is not None else "-"
    return f"{fingerprint}@{shown}"


def label_fingerprint(labels: dict[str, str]) -> str:
    """Stable stand-in for Alertmanager's fingerprint when a sender leaves it out."""
    blob = json.dumps(sorted(labels.items()), separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _first(labels: dict[str, str], names: list[str]) -> tuple[str | None, str | None]:
    for name in names:
        value = labels.get(name, "").strip()
        if value:
            return name, value
    return None, None


def derive_fault(alertname: str, table: list[tuple[str, FaultKind]]) -> FaultKind:
    squashed = re.sub(r"[^a-z0-9]", "", alertname.lower())
    for pattern, fault in table:
        if pattern in squashed:
            return fault
    return "unknown"


def map_alert(
    index: int,
    raw: Any,
    mapping: LabelMapping,
    *,
    default_dry_run: bool = False,
    now: datetime | None = None,
) -> Mapped:
    """Validate one raw alert and map it to a lost replica, a resolution, or a rejection."""
    try:
        alert = AlertmanagerAlert.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in ("alerts", index, *err["loc"]))
        return AlertRejected(index=index, field=field, reason="invalid", message=err["msg"])

    labels = alert.labels
    fingerprint = alert.fingerprint or label_fingerprint(labels)
    if len(json.dumps(labels)) > MAX_LABELS_BYTES:
        # Temporal refuses oversized payloads for the whole call; refusing the one alert
        # here keeps the rest of its batch deliverable.
        return AlertRejected(
            index=index,
            field=f"alerts.{index}.labels",
            reason="too_large",
            message=f"labels over {MAX_LABELS_BYTES} bytes",
            fingerprint=fingerprint[:64],
        )

    def reject(field: str, reason: str, message: str) -> AlertRejected:
        return AlertRejected(
            index=index,
            field=f"alerts.{index}.labels.{field}",
            reason=reason,
            message=message,
            fingerprint=fingerprint,
        )

    ns_label, namespace = _first(labels, mapping.namespace)
    if namespace is None:
        return reject(
            mapping.namespace[0], "missing_namespace", f"no label of {mapping.namespace} is set"
        )
    if not _DNS_LABEL.match(namespace):
        return reject(str(ns_label), "bad_namespace", "not a Kubernetes namespace name")
    pool_label, pool = _first(labels, mapping.pool)
    if pool is None:
        return reject(mapping.pool[0], "missing_pool", f"no label of {mapping.pool} is set")
    if not _DNS_SUBDOMAIN.match(pool):
        return reject(str(pool_label), "bad_pool", "not a Kubernetes object name")
    if len(pool) > MAX_POOL_CHARS:
        # The pool is the Service's name and the `app` label's value: 63 characters at most.
        return reject(str(pool_label), "bad_pool", f"longer than {MAX_POOL_CHARS} characters")
    pod_label, pod = _first(labels, mapping.pod)
    if pod is not None and not _DNS_SUBDOMAIN.match(pod):
        return reject(str(pod_label), "bad_pod", "not a Kubernetes pod name")
    node_label, node = _first(labels, mapping.node)
    if node is not None:
        # `instance` is host:port for a scrape target; the host is the node.
        node = re.sub(r":\d+$", "", node)
        if not _DNS_SUBDOMAIN.match(node):
            return reject(str(node_label), "bad_node", "not a Kubernetes node name")

    alertname = labels.get("alertname", "")
    fault_label, fault_value = _first(labels, mapping.fault)
    if fault_value is not None:
        if fault_value not in FAULT_KINDS:
            return reject(
                str(fault_label), "bad_fault", f"expected one of {', '.join(sorted(FAULT_KINDS))}"
            )
        fault: FaultKind = fault_value  # type: ignore[assignment]
    else:
        fault = derive_fault(alertname, mapping.fault_by_alertname)

    if alert.status == "resolved":
        return MappedResolved(
            index=index,
            resolved=AlertResolved(
                namespace=namespace,
                pool=pool,
                pod=pod,
                node=node,
                alertname=alertname,
                fingerprint=fingerprint,
                ends_at=alert.endsAt,
            ),
        )
    dry_run = default_dry_run or labels.get(mapping.dry_run, "").strip().lower() == "true"
    return MappedFiring(
        index=index,
        lost=LostReplica(
            namespace=namespace,
            pool=pool,
            pod=pod,
            node=node,
            fault=fault,
            alertname=alertname,
            fingerprint=fingerprint,
            starts_at=alert.startsAt,
            received_at=now or datetime.now(UTC),
            labels=labels,
            dry_run=dry_run,
        ),
    )
