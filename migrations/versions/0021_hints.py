"""Hints: the course's hint settings and lesson link, and every hint a learner opens.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("courses") as batch:
        batch.add_column(
            sa.Column("hint_unlock_attempts", sa.Integer(), server_default="0", nullable=False)
        )
        batch.add_column(
            sa.Column("hints_hide_fix", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch.add_column(
            sa.Column("lesson_url", sa.String(2000), server_default="", nullable=False)
        )
    op.create_table(
        "hint_opens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("course_id", sa.String(36), nullable=True),
        sa.Column("exercise_id", sa.String(100), nullable=False),
        sa.Column("submission_id", sa.String(36), nullable=False),
        sa.Column("diagnosis", sa.String(64), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_hint_opens_user_id_users")
        ),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_hint_opens_course_id_courses")
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_hint_opens_submission_id_submissions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_hint_opens")),
    )
    op.create_index("ix_hint_opens_user_id", "hint_opens", ["user_id"])
    op.create_index("ix_hint_opens_course_exercise", "hint_opens", ["course_id", "exercise_id"])


def downgrade() -> None:
    op.drop_index("ix_hint_opens_course_exercise", table_name="hint_opens")
    op.drop_index("ix_hint_opens_user_id", table_name="hint_opens")
    op.drop_table("hint_opens")
    with op.batch_alter_table("courses") as batch:
        batch.drop_column("lesson_url")
        batch.drop_column("hints_hide_fix")
        batch.drop_column("hint_unlock_attempts")
