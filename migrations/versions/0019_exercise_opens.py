"""When a course's learner first opened each exercise (item analysis: time from first open to
solved).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "exercise_opens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("course_id", sa.String(36), nullable=False),
        sa.Column("exercise_id", sa.String(100), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_exercise_opens_course_id_courses")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_exercise_opens_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exercise_opens")),
        sa.UniqueConstraint(
            "course_id",
            "exercise_id",
            "user_id",
            name=op.f("uq_exercise_opens_course_id"),
        ),
    )


def downgrade() -> None:
    op.drop_table("exercise_opens")
