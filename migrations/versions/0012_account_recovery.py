"""Accounts can be recovered and disabled: password reset requests (with the hashed token of
the link mailed), a user's `disabled_at`, and where each web session was signed in from.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("web_sessions") as batch:
        batch.add_column(sa.Column("client_address", sa.String(64), nullable=True))
        batch.add_column(sa.Column("user_agent", sa.String(200), nullable=True))
    op.create_table(
        "password_reset_requests",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("email", sa.String(255), nullable=False),
        sa.Column("client_address", sa.String(64), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=True),
        sa.Column("token_hash", sa.String(64), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_password_reset_requests_user_id_users"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_password_reset_requests")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_password_reset_requests_token_hash")),
    )
    for column in ("email", "client_address", "requested_at", "user_id"):
        op.create_index(
            f"ix_password_reset_requests_{column}", "password_reset_requests", [column]
        )


def downgrade() -> None:
    for column in ("email", "client_address", "requested_at", "user_id"):
        op.drop_index(f"ix_password_reset_requests_{column}", table_name="password_reset_requests")
    op.drop_table("password_reset_requests")
    with op.batch_alter_table("web_sessions") as batch:
        batch.drop_column("user_agent")
        batch.drop_column("client_address")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("disabled_at")
