"""Per-exercise attempt limits and timed attempts; per-learner extensions.

Revision ID: 0022
Revises: 0020
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("max_attempts", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("time_limit_minutes", sa.Integer(), nullable=True))
        batch.create_check_constraint(
            op.f("ck_assignments_max_attempts"), "max_attempts IS NULL OR max_attempts >= 1"
        )
        batch.create_check_constraint(
            op.f("ck_assignments_time_limit_minutes"),
            "time_limit_minutes IS NULL OR time_limit_minutes >= 1",
        )
    op.create_table(
        "extensions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("course_id", sa.String(36), nullable=False),
        sa.Column("exercise_id", sa.String(100), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("extra_attempts", sa.Integer(), nullable=False),
        sa.Column("extra_minutes", sa.Integer(), nullable=False),
        sa.Column("granted_by_id", sa.String(36), nullable=True),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("extra_attempts >= 0", name=op.f("ck_extensions_extra_attempts")),
        sa.CheckConstraint("extra_minutes >= 0", name=op.f("ck_extensions_extra_minutes")),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_extensions_course_id_courses")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_extensions_user_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["granted_by_id"], ["users.id"], name=op.f("fk_extensions_granted_by_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_extensions")),
        sa.UniqueConstraint(
            "course_id", "exercise_id", "user_id", name=op.f("uq_extensions_course_id")
        ),
    )


def downgrade() -> None:
    op.drop_table("extensions")
    with op.batch_alter_table("assignments") as batch:
        batch.drop_constraint(op.f("ck_assignments_time_limit_minutes"), type_="check")
        batch.drop_constraint(op.f("ck_assignments_max_attempts"), type_="check")
        batch.drop_column("time_limit_minutes")
        batch.drop_column("max_attempts")
