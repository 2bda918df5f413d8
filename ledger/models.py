"""The ledger's tables: incidents, operations, reconciliation runs and their findings.

Read by `ledger.store` and `ledger.reconcile` (as Core tables) and by Alembic's env.py
(as the metadata the migrations must match; `tests/ledger/test_migrations.py` checks it).
The schema only changes through `migrations/versions/`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

STATES = ("proposed", "applied", "confirmed", "failed", "compensated")
ORIGINS = ("effect", "action")
FINDING_KINDS = ("duplicate", "orphan", "drift")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def _now() -> Any:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class Incident(Base):
    """One incident; rows are created by the first operation proposed for it."""

    __tablename__ = "incidents"

    incident_id: Mapped[str] = mapped_column(Text, primary_key=True)
    opened_at: Mapped[datetime] = _now()
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    summary: Mapped[str | None] = mapped_column(Text)
    attributes: Mapped[dict[str, Any]] = mapped_column(
        JSONB, server_default=text("'{}'::jsonb"), nullable=False
    )


class Operation(Base):
    """One external effect, keyed by the caller's op id, and what became of it.

    state: proposed -> applied -> confirmed; failed; compensated (by the operation whose
    `compensates` names this one). `claim_token`/`claim_expires_at` are the lease of the
    worker currently applying a proposed operation; `attempts` counts the claims.
    """

    __tablename__ = "operations"
    __table_args__ = (
        CheckConstraint(f"state IN {STATES!r}", name="state"),
        CheckConstraint(f"origin IN {ORIGINS!r}", name="origin"),
        CheckConstraint("attempts >= 0", name="attempts"),
        CheckConstraint("compensates IS NULL OR compensates <> op_id", name="not_self"),
        Index("ix_operations_incident_id", "incident_id"),
        # Duplicates: consecutive applied operations on the same (incident, kind, target).
        Index("ix_operations_group", "incident_id", "kind", "target", "applied_at"),
        # Orphans: the unconfirmed minority, kept small by a partial index.
        Index(
            "ix_operations_unconfirmed",
            "proposed_at",
            postgresql_where=text("state IN ('proposed', 'applied')"),
        ),
        Index("ix_operations_emergency", "applied_at", postgresql_where=text("emergency")),
        Index(
            "ix_operations_compensates",
            "compensates",
            postgresql_where=text("compensates IS NOT NULL"),
        ),
    )

    op_id: Mapped[str] = mapped_column(Text, primary_key=True)
    incident_id: Mapped[str | None] = mapped_column(
        Text, ForeignKey("incidents.incident_id", ondelete="RESTRICT")
    )
    origin: Mapped[str] = mapped_column(Text, server_default="effect", nullable=False)
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    target: Mapped[str] = mapped_column(Text, nullable=False)
    intent: Mapped[dict[str, Any]] = mapped_column(
        JSONB, server_default=text("'{}'::jsonb"), nullable=False
    )
    state: Mapped[str] = mapped_column(Text, server_default="proposed", nullable=False)
    compensates: Mapped[str | None] = mapped_column(
        Text, ForeignKey("operations.op_id", ondelete="RESTRICT")
    )
    dry_run: Mapped[bool] = mapped_column(Boolean, server_default=text("false"), nullable=False)
    emergency: Mapped[bool] = mapped_column(Boolean, server_default=text("false"), nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"), nullable=False)
    claim_token: Mapped[str | None] = mapped_column(Text)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    claim_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    proposed_at: Mapped[datetime] = _now()
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    confirmed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    compensated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = _now()
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)  # what apply observed
    evidence: Mapped[dict[str, Any] | None] = mapped_column(JSONB)  # what confirm observed
    error: Mapped[str | None] = mapped_column(Text)  # last error of an attempt, or why failed


class ReconciliationRun(Base):
    __tablename__ = "reconciliation_runs"

    run_id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    reconciler: Mapped[str] = mapped_column(Text, nullable=False)
    incident_id: Mapped[str | None] = mapped_column(Text)  # scope; None: the whole ledger
    grace_seconds: Mapped[float] = mapped_column(Float, nullable=False)
    started_at: Mapped[datetime] = _now()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    duplicates: Mapped[int] = mapped_column(Integer, server_default=text("0"), nullable=False)
    orphans: Mapped[int] = mapped_column(Integer, server_default=text("0"), nullable=False)
    drift: Mapped[int] = mapped_column(Integer, server_default=text("0"), nullable=False)


class ReconciliationFinding(Base):
    """One anomaly, reported once: (kind, op_id) is unique across all runs."""

    __tablename__ = "reconciliation_findings"
    __table_args__ = (
        CheckConstraint(f"kind IN {FINDING_KINDS!r}", name="kind"),
        UniqueConstraint("kind", "op_id"),
        Index("ix_reconciliation_findings_run_id", "run_id"),
        Index("ix_reconciliation_findings_incident_id", "incident_id"),
    )

    finding_id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    run_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("reconciliation_runs.run_id", ondelete="CASCADE"), nullable=False
    )
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    op_id: Mapped[str] = mapped_column(
        Text, ForeignKey("operations.op_id", ondelete="CASCADE"), nullable=False
    )
    related_op_id: Mapped[str | None] = mapped_column(
        Text, ForeignKey("operations.op_id", ondelete="CASCADE")
    )
    incident_id: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[dict[str, Any]] = mapped_column(
        JSONB, server_default=text("'{}'::jsonb"), nullable=False
    )
    found_at: Mapped[datetime] = _now()


operations = cast(Table, Operation.__table__)
incidents = cast(Table, Incident.__table__)
reconciliation_runs = cast(Table, ReconciliationRun.__table__)
reconciliation_findings = cast(Table, ReconciliationFinding.__table__)
