"""The tool's LTI private keys are stored sealed: the column that held their PEM is renamed.
And an LMS course's AGS line items container is kept, for the line items the tool makes; and
a login's LTI Platform Storage target and the value it put there.

The rows keep their plain PEM through this revision (sealing needs the key-encryption key,
which lives outside the database); the server's start-up (`prepare_tool_keys`) seals them
before it answers anything. Downgrading unseals nothing: run it only on a database whose keys
are still plain, or rotate the tool's keys after it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("lti_tool_keys") as batch:
        batch.alter_column("private_key_pem", new_column_name="private_key_sealed")
    with op.batch_alter_table("lti_contexts") as batch:
        batch.add_column(sa.Column("lineitems_url", sa.String(1000), nullable=True))
    with op.batch_alter_table("lti_login_states") as batch:
        batch.add_column(sa.Column("storage_target", sa.String(100), nullable=True))
        batch.add_column(sa.Column("storage_value", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lti_login_states") as batch:
        batch.drop_column("storage_value")
        batch.drop_column("storage_target")
    with op.batch_alter_table("lti_contexts") as batch:
        batch.drop_column("lineitems_url")
    with op.batch_alter_table("lti_tool_keys") as batch:
        batch.alter_column("private_key_sealed", new_column_name="private_key_pem")
