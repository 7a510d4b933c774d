"""Why a regrade was asked for, so that a learner whose result it changed is told why.

`reason` is one of app.models.RegradeReason (`exercise-updated`, `grader-updated`,
`instructor-request`); `note` is the instructor's own words, if any. Regrades from before this
revision have neither: the page then says only what their exercise versions show.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("regrades") as batch:
        batch.add_column(sa.Column("reason", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("regrades") as batch:
        batch.drop_column("note")
        batch.drop_column("reason")
