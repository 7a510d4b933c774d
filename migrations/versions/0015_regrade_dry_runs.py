"""A regrade's dry run: each submission graded again, its new result kept beside it only.

Revision ID: 0015
Revises: 0013
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dry_run_grades",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("submission_id", sa.String(36), nullable=False),
        sa.Column("requested_by_id", sa.String(36), nullable=True),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("new_score", sa.Float(), nullable=True),
        sa.Column("new_max_score", sa.Float(), nullable=True),
        sa.Column("new_diagnosis", sa.String(64), nullable=True),
        sa.Column("new_exercise_version", sa.String(64), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["requested_by_id"],
            ["users.id"],
            name=op.f("fk_dry_run_grades_requested_by_id_users"),
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_dry_run_grades_submission_id_submissions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dry_run_grades")),
    )
    op.create_index("ix_dry_run_grades_batch_id", "dry_run_grades", ["batch_id"])
    op.create_index("ix_dry_run_grades_submission_id", "dry_run_grades", ["submission_id"])


def downgrade() -> None:
    op.drop_index("ix_dry_run_grades_submission_id", table_name="dry_run_grades")
    op.drop_index("ix_dry_run_grades_batch_id", table_name="dry_run_grades")
    op.drop_table("dry_run_grades")
