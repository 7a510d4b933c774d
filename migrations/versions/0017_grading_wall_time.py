"""Each grading's wall time is kept with its submission, and `graded_at` is indexed: a Celery
worker claims the queued submission whose owner used the least of the slots lately, summed from
the gradings of the last minutes (app/grading/fair_claim.py).

Revision ID: 0017
Revises: 0015
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("grading_wall_seconds", sa.Float(), nullable=True))
        batch.create_index("ix_submissions_graded_at", ["graded_at"])


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_index("ix_submissions_graded_at")
        batch.drop_column("grading_wall_seconds")
