"""One settings object for every fleetmend process, read from `FLEETMEND_*` variables.

Called from `worker/cli.py` at start-up, before anything connects anywhere: a bad value
stops the process there with a message naming the variable, never halfway through an
incident. Every field's description is its documentation (`fleetmend settings` prints it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "FLEETMEND_"


class SettingsError(ValueError):
    """A setting has a value fleetmend cannot start with; the message names the variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    # Temporal
    temporal_address: str = Field(
        "127.0.0.1:7233", description="Temporal frontend host:port the worker, intake and CLI use."
    )
    temporal_namespace: str = Field("default", description="Temporal namespace of the incidents.")
    task_queue: str = Field("fleetmend", description="Task queue the worker polls.")
    temporal_ui_port: int = Field(
        8233, ge=1, le=65535, description="Web UI port of the local dev server (`fleetmend up`)."
    )

    # Ledger
    database_url: str | None = Field(
        None,
        description=(
            "SQLAlchemy URL of the ledger (postgresql+psycopg://...). Unset: `fleetmend up` and "
            "`demo` start an embedded PostgreSQL with its data under FLEETMEND_STATE_DIR."
        ),
    )
    state_dir: Path = Field(
        Path(".fleetmend"),
        description="Where the local stack keeps its data: Postgres, Temporal's SQLite file, logs.",
    )

    # Intake
    intake_host: str = Field("127.0.0.1", description="Address the Alertmanager intake binds.")
    intake_port: int = Field(8787, ge=1, le=65535, description="Port the intake binds.")
    intake_token: SecretStr | None = Field(
        None,
        description=(
            "Bearer token Alertmanager must send (http_config.authorization). Required by "
            "`fleetmend intake`; `fleetmend up` generates one under the state dir if unset."
        ),
    )
    intake_basic_user: str | None = Field(None, description="Optional basic-auth user.")
    intake_basic_password: SecretStr | None = Field(
        None, description="Optional basic-auth password."
    )

    # Kubernetes
    kubeconfig: Path | None = Field(
        None,
        description="Kubeconfig file the worker uses; unset with kube_in_cluster=false: ~/.kube/config.",
    )
    kube_context: str | None = Field(None, description="Context in the kubeconfig; unset: current.")
    kube_in_cluster: bool = Field(
        False, description="Use the pod's service account instead of a kubeconfig."
    )

    # Safety limits
    blast_radius_fraction: float = Field(
        0.25,
        gt=0,
        le=1,
        description="Largest fraction of a pool's replicas derouted without an operator's approval.",
    )
    auto_shed_tier_limit: int = Field(
        2,
        ge=0,
        le=4,
        description="Highest shedding tier applied automatically (0 none .. 4 feature off); above it, a gate.",
    )
    gate_timeout_s: float = Field(
        900.0, gt=0, description="Seconds an approval gate waits before its safe default applies."
    )
    dry_run: bool = Field(
        False, description="Record every mutating step's intent in the ledger and apply nothing."
    )
    ramp: bool = Field(
        True,
        description=(
            "Drills only: false skips the gradual ramp, so a replacement takes an equal "
            "share the moment it is ready (the runbook's baseline); the timeline records it."
        ),
    )
    time_scale: float = Field(
        1.0,
        ge=1,
        le=1000,
        description=(
            "Drills only: an incident's own waits (ramp steps, cool-downs, probe windows, "
            "gate timeouts) are divided by this, to match a fleet simulated faster than real "
            "time. Production keeps 1."
        ),
    )
    max_concurrent_activities: int = Field(
        16, ge=1, le=512, description="Activities the worker runs at once (its thread pool size)."
    )
    ledger_lease_s: float = Field(
        15.0,
        gt=0,
        le=600,
        description=(
            "Seconds a worker's claim on an effect stays exclusive; renewed every third of it "
            "while the effect runs, so after a worker dies its effects are retried this soon."
        ),
    )
    provision_lead_time_s: float = Field(
        900.0,
        gt=0,
        description="Provisioning lead time announced when no past startup was observed.",
    )
    notify_webhook_url: str | None = Field(
        None,
        description="Incident channel: a JSON webhook (Slack-compatible body). Unset: log only.",
    )
    router_metrics_url: str | None = Field(
        None,
        description=(
            "The gateway's Prometheus /metrics with router_requests_retried_total and "
            "router_streams_terminated_total per namespace and pod (the in-flight step's "
            "counts). Unset: the retry contract still applies, the counts are reported unknown."
        ),
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of the worker and the intake."
    )

    @field_validator("temporal_address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("expected host:port")
        return value

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgresql+psycopg://")):
            raise ValueError("the ledger is PostgreSQL only: expected postgresql+psycopg://...")
        if value is not None and value.startswith("postgresql://"):
            value = "postgresql+psycopg://" + value.removeprefix("postgresql://")
        return value

    @model_validator(mode="after")
    def _basic_auth_pairs(self) -> Settings:
        if (self.intake_basic_user is None) != (self.intake_basic_password is None):
            raise ValueError(
                "FLEETMEND_INTAKE_BASIC_USER and FLEETMEND_INTAKE_BASIC_PASSWORD go together"
            )
        return self


def load_settings(**overrides: object) -> Settings:
    """Read the environment; a bad value raises SettingsError naming the variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"])
            name = f"{ENV_PREFIX}{field.upper()}" if field else "settings"
            got = err.get("input")
            shown = "" if isinstance(got, dict) or field == "" else f" (got {got!r})"
            if "password" in field or "token" in field:
                shown = ""
            elif field.endswith("_url") and isinstance(got, str):
                # A URL's userinfo and query can hold a password: show only where it points.
                from activities.redact import redact_url

                shown = f" (got {redact_url(got)!r})"
            problems.append(f"{name}: {err['msg']}{shown}")
        raise SettingsError("; ".join(problems)) from None


def describe_settings() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting: the README table and `--help`."""
    rows = []
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = "(unset)" if default is None else str(default)
        rows.append((f"{ENV_PREFIX}{name.upper()}", shown, field.description or ""))
    return rows


def settings_env(settings: Settings) -> dict[str, str]:
    """The FLEETMEND_* variables that reproduce `settings` in a child process."""
    env: dict[str, str] = {}
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, bool):
            value = "true" if value else "false"
        env[f"{ENV_PREFIX}{name.upper()}"] = str(value)
    return env
