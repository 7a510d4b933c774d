"""Leases on running submissions and the time each was queued, for the sweep of many hosts.

A running row's claim lasts until `lease_expires_at` unless its worker renews it; a sweep puts
expired ones back in the queue. `queued_at` tells the sweep which queued rows waited so long
that the broker must have lost their message. Rows running before this revision have no lease:
the sweep counts them as expired.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.add_column(sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE submissions SET queued_at = created_at WHERE status = 'queued'")


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("queued_at")
