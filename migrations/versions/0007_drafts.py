"""Drafts: a signed-in learner's unsubmitted code per exercise (in a course or in practice),
and code submitted from a page whose session had ended, kept until the browser signs in.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "drafts",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("course_id", sa.String(36), nullable=True),
        sa.Column("exercise_id", sa.String(100), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_drafts_user_id_users")),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_drafts_course_id_courses")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_drafts")),
        sa.UniqueConstraint(
            "user_id", "course_id", "exercise_id", name=op.f("uq_drafts_user_id")
        ),
    )
    # NULLs are distinct in a unique constraint: practice drafts (no course) need their own.
    op.create_index(
        "uq_drafts_practice",
        "drafts",
        ["user_id", "exercise_id"],
        unique=True,
        sqlite_where=sa.text("course_id IS NULL"),
        postgresql_where=sa.text("course_id IS NULL"),
    )
    op.create_table(
        "kept_submissions",
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("page_path", sa.String(300), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("client_address", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_kept_submissions")),
    )
    op.create_index("ix_kept_submissions_expires_at", "kept_submissions", ["expires_at"])
    op.create_index(
        "ix_kept_submissions_client_address", "kept_submissions", ["client_address"]
    )


def downgrade() -> None:
    op.drop_index("ix_kept_submissions_client_address", table_name="kept_submissions")
    op.drop_index("ix_kept_submissions_expires_at", table_name="kept_submissions")
    op.drop_table("kept_submissions")
    op.drop_index("uq_drafts_practice", table_name="drafts")
    op.drop_table("drafts")
