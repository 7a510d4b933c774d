"""A result's words rendered when read: `submissions.feedback_claims`.

For a result stored from this revision on, `feedback` holds the grader's facts alone and
`feedback_claims` the keys of the claims that held (a JSON list); the words of the diagnosis
and of the claims are made when the result is shown, so rewording them changes no grade. A
row stored before keeps NULL here, and its feedback is shown as it was stored.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("feedback_claims", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_column("feedback_claims")
