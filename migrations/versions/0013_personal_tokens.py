"""Personal access tokens: a learner's client submits and reads their own work with one; a
submission records the token it came by.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "personal_tokens",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_personal_tokens_user_id_users")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_personal_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_personal_tokens_token_hash")),
    )
    op.create_index("ix_personal_tokens_user_id", "personal_tokens", ["user_id"])
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("personal_token_id", sa.String(36), nullable=True))
        batch.create_foreign_key(
            "fk_submissions_personal_token_id_personal_tokens",
            "personal_tokens",
            ["personal_token_id"],
            ["id"],
        )


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_constraint(
            "fk_submissions_personal_token_id_personal_tokens", type_="foreignkey"
        )
        batch.drop_column("personal_token_id")
    op.drop_index("ix_personal_tokens_user_id", table_name="personal_tokens")
    op.drop_table("personal_tokens")
