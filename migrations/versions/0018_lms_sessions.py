"""Sessions started by an LMS launch keep the LMS page's origin (and so do the launch tickets
that start them): such a session has no "Sign out", and its frame's resize messages go to
that origin.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("web_sessions") as batch:
        batch.add_column(sa.Column("lms_origin", sa.String(255), nullable=True))
    with op.batch_alter_table("lti_launch_tickets") as batch:
        batch.add_column(sa.Column("lms_origin", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lti_launch_tickets") as batch:
        batch.drop_column("lms_origin")
    with op.batch_alter_table("web_sessions") as batch:
        batch.drop_column("lms_origin")
