"""A link's line item is made by one delivery at a time: the delivery that is making it holds
a claim on the link (a random token and the time it lapses), taken in a committed transaction
of its own before the line item POST, so that two first scores delivered at once, by two hosts
or after a lost answer, make one LMS gradebook column. A claim whose holder died lapses.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("lti_resource_links") as batch:
        batch.add_column(sa.Column("lineitem_claim", sa.String(length=32), nullable=True))
        batch.add_column(
            sa.Column("lineitem_claimed_until", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("lti_resource_links") as batch:
        batch.drop_column("lineitem_claimed_until")
        batch.drop_column("lineitem_claim")
