"""A hint level opens once per learner, course (or practice), exercise and diagnosis.

Concurrent "open hint 1" requests each stored a row (11 from one learner), which skewed the
course's hint statistics. Duplicates already stored are removed, the first of each kept; then
two partial unique indexes (a course's openings, and practice's, whose course is NULL: NULLs
never collide in a plain unique index) stop new ones.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COURSE_OPENING = ["user_id", "course_id", "exercise_id", "diagnosis", "level"]
PRACTICE_OPENING = ["user_id", "exercise_id", "diagnosis", "level"]


def upgrade() -> None:
    # GROUP BY puts NULL courses together, as the practice index will.
    op.execute(
        "DELETE FROM hint_opens WHERE id NOT IN (SELECT MIN(id) FROM hint_opens "
        "GROUP BY user_id, course_id, exercise_id, diagnosis, level)"
    )
    op.create_index(
        "uq_hint_opens_course_opening",
        "hint_opens",
        COURSE_OPENING,
        unique=True,
        sqlite_where=sa.text("course_id IS NOT NULL"),
        postgresql_where=sa.text("course_id IS NOT NULL"),
    )
    op.create_index(
        "uq_hint_opens_practice_opening",
        "hint_opens",
        PRACTICE_OPENING,
        unique=True,
        sqlite_where=sa.text("course_id IS NULL"),
        postgresql_where=sa.text("course_id IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_hint_opens_practice_opening", table_name="hint_opens")
    op.drop_index("uq_hint_opens_course_opening", table_name="hint_opens")
