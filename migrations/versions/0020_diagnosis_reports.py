"""A learner's report that a submission's diagnosis looks wrong, one per submission.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "diagnosis_reports",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("submission_id", sa.String(36), nullable=False),
        sa.Column("course_id", sa.String(36), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("diagnosis", sa.String(64), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_diagnosis_reports_submission_id_submissions"),
        ),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_diagnosis_reports_course_id_courses")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_diagnosis_reports_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_diagnosis_reports")),
        sa.UniqueConstraint("submission_id", name=op.f("uq_diagnosis_reports_submission_id")),
    )
    op.create_index("ix_diagnosis_reports_course_id", "diagnosis_reports", ["course_id"])


def downgrade() -> None:
    op.drop_index("ix_diagnosis_reports_course_id", table_name="diagnosis_reports")
    op.drop_table("diagnosis_reports")
