"""Ledger tables: incidents, operations, reconciliation runs and findings.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 08:33:10.519634
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "incidents",
        sa.Column("incident_id", sa.Text(), nullable=False),
        sa.Column(
            "opened_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column(
            "attributes",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("incident_id", name=op.f("pk_incidents")),
    )
    op.create_table(
        "reconciliation_runs",
        sa.Column("run_id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("reconciler", sa.Text(), nullable=False),
        sa.Column("incident_id", sa.Text(), nullable=True),
        sa.Column("grace_seconds", sa.Float(), nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("duplicates", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("orphans", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("drift", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_reconciliation_runs")),
    )
    op.create_table(
        "operations",
        sa.Column("op_id", sa.Text(), nullable=False),
        sa.Column("incident_id", sa.Text(), nullable=True),
        sa.Column("origin", sa.Text(), server_default="effect", nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column(
            "intent",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("state", sa.Text(), server_default="proposed", nullable=False),
        sa.Column("compensates", sa.Text(), nullable=True),
        sa.Column("dry_run", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("emergency", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("claim_token", sa.Text(), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claim_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "proposed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("compensated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("evidence", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint("origin IN ('effect', 'action')", name=op.f("ck_operations_origin")),
        sa.CheckConstraint(
            "state IN ('proposed', 'applied', 'confirmed', 'failed', 'compensated')",
            name=op.f("ck_operations_state"),
        ),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_operations_attempts")),
        sa.CheckConstraint(
            "compensates IS NULL OR compensates <> op_id", name=op.f("ck_operations_not_self")
        ),
        sa.ForeignKeyConstraint(
            ["compensates"],
            ["operations.op_id"],
            name=op.f("fk_operations_compensates_operations"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["incident_id"],
            ["incidents.incident_id"],
            name=op.f("fk_operations_incident_id_incidents"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("op_id", name=op.f("pk_operations")),
    )
    op.create_index(
        "ix_operations_compensates",
        "operations",
        ["compensates"],
        unique=False,
        postgresql_where=sa.text("compensates IS NOT NULL"),
    )
    op.create_index(
        "ix_operations_emergency",
        "operations",
        ["applied_at"],
        unique=False,
        postgresql_where=sa.text("emergency"),
    )
    op.create_index(
        "ix_operations_group",
        "operations",
        ["incident_id", "kind", "target", "applied_at"],
        unique=False,
    )
    op.create_index("ix_operations_incident_id", "operations", ["incident_id"], unique=False)
    op.create_index(
        "ix_operations_unconfirmed",
        "operations",
        ["proposed_at"],
        unique=False,
        postgresql_where=sa.text("state IN ('proposed', 'applied')"),
    )
    op.create_table(
        "reconciliation_findings",
        sa.Column("finding_id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("run_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("op_id", sa.Text(), nullable=False),
        sa.Column("related_op_id", sa.Text(), nullable=True),
        sa.Column("incident_id", sa.Text(), nullable=True),
        sa.Column(
            "detail",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "found_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.CheckConstraint(
            "kind IN ('duplicate', 'orphan', 'drift')", name=op.f("ck_reconciliation_findings_kind")
        ),
        sa.ForeignKeyConstraint(
            ["op_id"],
            ["operations.op_id"],
            name=op.f("fk_reconciliation_findings_op_id_operations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["related_op_id"],
            ["operations.op_id"],
            name=op.f("fk_reconciliation_findings_related_op_id_operations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["reconciliation_runs.run_id"],
            name=op.f("fk_reconciliation_findings_run_id_reconciliation_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("finding_id", name=op.f("pk_reconciliation_findings")),
        sa.UniqueConstraint("kind", "op_id", name=op.f("uq_reconciliation_findings_kind_op_id")),
    )
    op.create_index(
        "ix_reconciliation_findings_incident_id",
        "reconciliation_findings",
        ["incident_id"],
        unique=False,
    )
    op.create_index(
        "ix_reconciliation_findings_run_id", "reconciliation_findings", ["run_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_reconciliation_findings_run_id", table_name="reconciliation_findings")
    op.drop_index("ix_reconciliation_findings_incident_id", table_name="reconciliation_findings")
    op.drop_table("reconciliation_findings")
    op.drop_index(
        "ix_operations_unconfirmed",
        table_name="operations",
        postgresql_where=sa.text("state IN ('proposed', 'applied')"),
    )
    op.drop_index("ix_operations_incident_id", table_name="operations")
    op.drop_index("ix_operations_group", table_name="operations")
    op.drop_index(
        "ix_operations_emergency", table_name="operations", postgresql_where=sa.text("emergency")
    )
    op.drop_index(
        "ix_operations_compensates",
        table_name="operations",
        postgresql_where=sa.text("compensates IS NOT NULL"),
    )
    op.drop_table("operations")
    op.drop_table("reconciliation_runs")
    op.drop_table("incidents")
