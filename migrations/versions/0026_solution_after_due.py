"""Solution release: `assignments.show_solution_after_due`.

An exercise a course sets may show its learners the reference solution once its due date has
passed for them (never before it; never while their own extended due date is still ahead).
Off for every exercise already set.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.add_column(
            sa.Column(
                "show_solution_after_due",
                sa.Boolean(),
                nullable=False,
                server_default=sa.false(),
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("show_solution_after_due")
