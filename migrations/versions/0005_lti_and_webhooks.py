"""LTI 1.3: platforms and deployments, the tool's keys, login states, launch tickets, the
platforms' users, contexts and resource links mapped to ours; course webhooks.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "lti_platforms",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("issuer", sa.String(255), nullable=False),
        sa.Column("client_id", sa.String(255), nullable=False),
        sa.Column("auth_url", sa.String(1000), nullable=False),
        sa.Column("token_url", sa.String(1000), nullable=False),
        sa.Column("jwks_url", sa.String(1000), nullable=False),
        sa.Column("frame_origins", sa.JSON(), nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_platforms")),
        sa.UniqueConstraint("issuer", "client_id", name=op.f("uq_lti_platforms_issuer")),
    )
    op.create_table(
        "lti_deployments",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("platform_id", sa.String(36), nullable=False),
        sa.Column("deployment_id", sa.String(255), nullable=False),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_deployments_platform_id_lti_platforms"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_deployments")),
        sa.UniqueConstraint(
            "platform_id", "deployment_id", name=op.f("uq_lti_deployments_platform_id")
        ),
    )
    op.create_index(op.f("ix_lti_deployments_platform_id"), "lti_deployments", ["platform_id"])
    op.create_table(
        "lti_tool_keys",
        sa.Column("kid", sa.String(64), nullable=False),
        sa.Column("private_key_pem", sa.Text(), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("retired_at", WHEN, nullable=True),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_lti_tool_keys")),
    )
    op.create_table(
        "lti_login_states",
        sa.Column("state", sa.String(64), nullable=False),
        sa.Column("nonce", sa.String(64), nullable=False),
        sa.Column("platform_id", sa.String(36), nullable=False),
        sa.Column("target_link_uri", sa.String(1000), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("expires_at", WHEN, nullable=False),
        sa.Column("used_at", WHEN, nullable=True),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_login_states_platform_id_lti_platforms"),
        ),
        sa.PrimaryKeyConstraint("state", name=op.f("pk_lti_login_states")),
    )
    op.create_index(op.f("ix_lti_login_states_expires_at"), "lti_login_states", ["expires_at"])
    op.create_table(
        "lti_users",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("platform_id", sa.String(36), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_users_platform_id_lti_platforms"),
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_lti_users_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_users")),
        sa.UniqueConstraint("platform_id", "subject", name=op.f("uq_lti_users_platform_id")),
    )
    op.create_index(op.f("ix_lti_users_user_id"), "lti_users", ["user_id"])
    op.create_table(
        "lti_contexts",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("platform_id", sa.String(36), nullable=False),
        sa.Column("deployment_id", sa.String(255), nullable=False),
        sa.Column("context_id", sa.String(255), nullable=False),
        sa.Column("course_id", sa.String(36), nullable=False),
        sa.Column("memberships_url", sa.String(1000), nullable=True),
        sa.Column("roster_synced_at", WHEN, nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_contexts_platform_id_lti_platforms"),
        ),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_lti_contexts_course_id_courses")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_contexts")),
        sa.UniqueConstraint("platform_id", "context_id", name=op.f("uq_lti_contexts_platform_id")),
    )
    op.create_index(op.f("ix_lti_contexts_course_id"), "lti_contexts", ["course_id"])
    op.create_table(
        "lti_resource_links",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("platform_id", sa.String(36), nullable=False),
        sa.Column("resource_link_id", sa.String(255), nullable=False),
        sa.Column("lti_context_id", sa.String(36), nullable=False),
        sa.Column("exercise_id", sa.String(100), nullable=True),
        sa.Column("title", sa.String(255), nullable=True),
        sa.Column("lineitem_url", sa.String(1000), nullable=True),
        sa.Column("ags_scopes", sa.JSON(), nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_resource_links_platform_id_lti_platforms"),
        ),
        sa.ForeignKeyConstraint(
            ["lti_context_id"],
            ["lti_contexts.id"],
            name=op.f("fk_lti_resource_links_lti_context_id_lti_contexts"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_resource_links")),
        sa.UniqueConstraint(
            "platform_id", "resource_link_id", name=op.f("uq_lti_resource_links_platform_id")
        ),
    )
    op.create_index(
        op.f("ix_lti_resource_links_lti_context_id"), "lti_resource_links", ["lti_context_id"]
    )
    op.create_table(
        "lti_launch_tickets",
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("target_path", sa.String(1000), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("expires_at", WHEN, nullable=False),
        sa.Column("used_at", WHEN, nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_lti_launch_tickets_user_id_users")
        ),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_lti_launch_tickets")),
    )
    op.create_index(op.f("ix_lti_launch_tickets_expires_at"), "lti_launch_tickets", ["expires_at"])
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("course_id", sa.String(36), nullable=False),
        sa.Column("url", sa.String(1000), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("revoked_at", WHEN, nullable=True),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_webhooks_course_id_courses")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    op.create_index(op.f("ix_webhooks_course_id"), "webhooks", ["course_id"])


def downgrade() -> None:
    for table in (
        "webhooks",
        "lti_launch_tickets",
        "lti_resource_links",
        "lti_contexts",
        "lti_users",
        "lti_login_states",
        "lti_tool_keys",
        "lti_deployments",
        "lti_platforms",
    ):
        op.drop_table(table)
