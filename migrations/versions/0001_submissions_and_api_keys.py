"""Submissions (the grading job record) and API keys.

Revision ID: 0001
Revises:
Create Date: 2025-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_table(
        "submissions",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("exercise_id", sa.String(100), nullable=False),
        sa.Column("exercise_version", sa.String(64), nullable=False),
        sa.Column("learner", sa.String(255), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("max_score", sa.Float(), nullable=True),
        sa.Column("diagnosis", sa.String(64), nullable=True),
        sa.Column("checks", sa.JSON(), nullable=True),
        sa.Column("feedback", sa.Text(), nullable=True),
        sa.Column("plots", sa.JSON(), nullable=True),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("graded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("api_key_id", sa.String(36), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'graded', 'error')",
            name=op.f("ck_submissions_status_known"),
        ),
        sa.ForeignKeyConstraint(
            ["api_key_id"],
            ["api_keys.id"],
            name=op.f("fk_submissions_api_key_id_api_keys"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_submissions")),
    )
    op.create_index(op.f("ix_submissions_status"), "submissions", ["status"])
    op.create_index(op.f("ix_submissions_exercise_id"), "submissions", ["exercise_id"])
    op.create_index(op.f("ix_submissions_learner"), "submissions", ["learner"])
    op.create_index(op.f("ix_submissions_api_key_id"), "submissions", ["api_key_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_submissions_api_key_id"), table_name="submissions")
    op.drop_index(op.f("ix_submissions_learner"), table_name="submissions")
    op.drop_index(op.f("ix_submissions_exercise_id"), table_name="submissions")
    op.drop_index(op.f("ix_submissions_status"), table_name="submissions")
    op.drop_table("submissions")
    op.drop_table("api_keys")
