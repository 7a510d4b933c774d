"""What a client without an account can make the server store is counted per client address
and in all: a login's address (and its start, indexed for the count), the sign-ups of the
last window; and the times those counts and sweeps read are indexed (sign-in failures,
submissions: anonymous practice is counted in all).

Logins in progress are dropped (each lasts minutes and has no address to count it by): a
learner launching during the upgrade opens the link again.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(sa.text("DELETE FROM lti_login_states"))
    with op.batch_alter_table("lti_login_states") as batch:
        batch.add_column(sa.Column("client_address", sa.String(64), nullable=False))
        batch.create_index("ix_lti_login_states_client_address", ["client_address"])
        batch.create_index("ix_lti_login_states_created_at", ["created_at"])
    op.create_table(
        "sign_ups",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("client_address", sa.String(64), nullable=False),
        sa.Column("signed_up_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_ups")),
    )
    op.create_index("ix_sign_ups_client_address", "sign_ups", ["client_address"])
    op.create_index("ix_sign_ups_signed_up_at", "sign_ups", ["signed_up_at"])
    op.create_index("ix_sign_in_failures_failed_at", "sign_in_failures", ["failed_at"])
    op.create_index("ix_submissions_created_at", "submissions", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_submissions_created_at", table_name="submissions")
    op.drop_index("ix_sign_in_failures_failed_at", table_name="sign_in_failures")
    op.drop_index("ix_sign_ups_signed_up_at", table_name="sign_ups")
    op.drop_index("ix_sign_ups_client_address", table_name="sign_ups")
    op.drop_table("sign_ups")
    with op.batch_alter_table("lti_login_states") as batch:
        batch.drop_index("ix_lti_login_states_created_at")
        batch.drop_index("ix_lti_login_states_client_address")
        batch.drop_column("client_address")
