"""A course's own exercise list: its order, its units, and exercises removed but kept.

`position` and `unit` override the exercise's own (NULL: the exercise's); `removed_at` hides the
exercise from the course's learners while its submissions, grades and policies stay, so adding
it back restores them.

Revision ID: 0023
Revises: 0020
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(sa.Column("position", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("unit", sa.String(80), nullable=True))
        batch.add_column(sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("removed_at")
        batch.drop_column("unit")
        batch.drop_column("position")
