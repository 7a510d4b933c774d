"""People and courses: users, web sessions, sign-in failures, courses, enrolments,
assignments, regrades and the audit log; submissions and API keys gain a course.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("email", sa.String(255), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("site_role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "site_role IN ('admin', 'instructor', 'learner')",
            name=op.f("ck_users_site_role_known"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
    )
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_web_sessions_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_web_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_web_sessions_token_hash")),
    )
    op.create_index(op.f("ix_web_sessions_user_id"), "web_sessions", ["user_id"])
    op.create_table(
        "sign_in_failures",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("email", sa.String(255), nullable=False),
        sa.Column("client_ip", sa.String(64), nullable=False),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_in_failures")),
    )
    op.create_index(op.f("ix_sign_in_failures_email"), "sign_in_failures", ["email"])
    op.create_index(op.f("ix_sign_in_failures_client_ip"), "sign_in_failures", ["client_ip"])
    op.create_table(
        "courses",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("join_code", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by_id", sa.String(36), nullable=True),
        sa.ForeignKeyConstraint(
            ["created_by_id"], ["users.id"], name=op.f("fk_courses_created_by_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_courses")),
        sa.UniqueConstraint("join_code", name=op.f("uq_courses_join_code")),
    )
    op.create_table(
        "enrolments",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("course_id", sa.String(36), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "role IN ('learner', 'instructor')", name=op.f("ck_enrolments_role_known")
        ),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_enrolments_course_id_courses")
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_enrolments_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_enrolments")),
        sa.UniqueConstraint("course_id", "user_id", name=op.f("uq_enrolments_course_id")),
    )
    op.create_index(op.f("ix_enrolments_user_id"), "enrolments", ["user_id"])
    op.create_table(
        "assignments",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("course_id", sa.String(36), nullable=False),
        sa.Column("exercise_id", sa.String(100), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("late_policy", sa.String(16), nullable=False),
        sa.Column("late_penalty_percent_per_day", sa.Float(), nullable=False),
        sa.Column("scoring_policy", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "late_policy IN ('penalty', 'lock')", name=op.f("ck_assignments_late_policy_known")
        ),
        sa.CheckConstraint(
            "scoring_policy IN ('best', 'latest')",
            name=op.f("ck_assignments_scoring_policy_known"),
        ),
        sa.CheckConstraint(
            "late_penalty_percent_per_day >= 0 AND late_penalty_percent_per_day <= 100",
            name=op.f("ck_assignments_late_penalty_percent"),
        ),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_assignments_course_id_courses")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_assignments")),
        sa.UniqueConstraint("course_id", "exercise_id", name=op.f("uq_assignments_course_id")),
    )

    # Batch mode: SQLite adds foreign keys by rebuilding the table.
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("course_id", sa.String(36), nullable=True))
        batch.create_foreign_key(
            op.f("fk_api_keys_course_id_courses"), "courses", ["course_id"], ["id"]
        )
        batch.create_index(op.f("ix_api_keys_course_id"), ["course_id"])

    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("user_id", sa.String(36), nullable=True))
        batch.add_column(sa.Column("course_id", sa.String(36), nullable=True))
        batch.add_column(sa.Column("upload_filename", sa.String(255), nullable=True))
        batch.add_column(sa.Column("upload_notices", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("override_score", sa.Float(), nullable=True))
        batch.add_column(sa.Column("override_reason", sa.Text(), nullable=True))
        batch.add_column(sa.Column("override_by_id", sa.String(36), nullable=True))
        batch.add_column(sa.Column("override_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_foreign_key(
            op.f("fk_submissions_user_id_users"), "users", ["user_id"], ["id"]
        )
        batch.create_foreign_key(
            op.f("fk_submissions_course_id_courses"), "courses", ["course_id"], ["id"]
        )
        batch.create_foreign_key(
            op.f("fk_submissions_override_by_id_users"), "users", ["override_by_id"], ["id"]
        )
        batch.create_index(op.f("ix_submissions_user_id"), ["user_id"])
        batch.create_index(op.f("ix_submissions_course_id"), ["course_id"])

    op.create_table(
        "regrades",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.Column("submission_id", sa.String(36), nullable=False),
        sa.Column("requested_by_id", sa.String(36), nullable=True),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("old_status", sa.String(16), nullable=False),
        sa.Column("old_score", sa.Float(), nullable=True),
        sa.Column("old_max_score", sa.Float(), nullable=True),
        sa.Column("old_diagnosis", sa.String(64), nullable=True),
        sa.Column("old_exercise_version", sa.String(64), nullable=False),
        sa.Column("new_status", sa.String(16), nullable=True),
        sa.Column("new_score", sa.Float(), nullable=True),
        sa.Column("new_max_score", sa.Float(), nullable=True),
        sa.Column("new_diagnosis", sa.String(64), nullable=True),
        sa.Column("new_exercise_version", sa.String(64), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["submission_id"], ["submissions.id"], name=op.f("fk_regrades_submission_id_submissions")
        ),
        sa.ForeignKeyConstraint(
            ["requested_by_id"], ["users.id"], name=op.f("fk_regrades_requested_by_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_regrades")),
    )
    op.create_index(op.f("ix_regrades_batch_id"), "regrades", ["batch_id"])
    op.create_index(op.f("ix_regrades_submission_id"), "regrades", ["submission_id"])
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_id", sa.String(36), nullable=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("course_id", sa.String(36), nullable=True),
        sa.Column("submission_id", sa.String(36), nullable=True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["actor_id"], ["users.id"], name=op.f("fk_audit_events_actor_id_users")),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_audit_events_course_id_courses")
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_audit_events_submission_id_submissions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index(op.f("ix_audit_events_at"), "audit_events", ["at"])
    op.create_index(op.f("ix_audit_events_course_id"), "audit_events", ["course_id"])
    op.create_index(op.f("ix_audit_events_submission_id"), "audit_events", ["submission_id"])


def downgrade() -> None:
    op.drop_table("audit_events")
    op.drop_table("regrades")
    with op.batch_alter_table("submissions") as batch:
        batch.drop_index(op.f("ix_submissions_course_id"))
        batch.drop_index(op.f("ix_submissions_user_id"))
        batch.drop_constraint(op.f("fk_submissions_override_by_id_users"), type_="foreignkey")
        batch.drop_constraint(op.f("fk_submissions_course_id_courses"), type_="foreignkey")
        batch.drop_constraint(op.f("fk_submissions_user_id_users"), type_="foreignkey")
        for column in (
            "override_at",
            "override_by_id",
            "override_reason",
            "override_score",
            "upload_notices",
            "upload_filename",
            "course_id",
            "user_id",
        ):
            batch.drop_column(column)
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_index(op.f("ix_api_keys_course_id"))
        batch.drop_constraint(op.f("fk_api_keys_course_id_courses"), type_="foreignkey")
        batch.drop_column("course_id")
    op.drop_table("assignments")
    op.drop_table("enrolments")
    op.drop_table("courses")
    op.drop_table("sign_in_failures")
    op.drop_index(op.f("ix_web_sessions_user_id"), table_name="web_sessions")
    op.drop_table("web_sessions")
    op.drop_table("users")
