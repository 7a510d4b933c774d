"""Anonymous practice submissions keep the client address they came from, for its rate limit.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("client_address", sa.String(64), nullable=True))
        batch.create_index(op.f("ix_submissions_client_address"), ["client_address"])


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_index(op.f("ix_submissions_client_address"))
        batch.drop_column("client_address")
