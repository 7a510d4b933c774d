"""Which queued submission a Celery worker grades: each owner gets its share across workers.

The Celery message is only a wake-up: every queued submission has one, and each grades one
queued submission, not necessarily its own. The worker claims the submission whose owner
(app/grading/fair_share.OWNER) has the fewest runs in progress on any worker, then used the
slots least in the last `USAGE_WINDOW_SECONDS` (each grading's whole wall time: sleeping holds a
slot as computing does), then the oldest. So one learner's slow submissions do not make
another's wait behind them, whichever workers took them. On PostgreSQL the choice locks its row
with `FOR UPDATE SKIP LOCKED`: workers choosing at once take different rows; SQLite has one
writer at a time.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.grading.fair_share import OWNER
from app.grading.jobs import GradingJob, claim_submission
from app.models import Submission, SubmissionStatus, utc_now

# Slot time older than this no longer counts against its owner.
USAGE_WINDOW_SECONDS = 300.0


def claim_fairest_submission(session: Session, *, lease_seconds: float) -> GradingJob | None:
    """Claim the queued submission whose owner is owed the most; None when none is queued."""
    since = utc_now() - timedelta(seconds=USAGE_WINDOW_SECONDS)
    runs = (
        select(OWNER.label("owner"), func.count().label("count"))
        .where(Submission.status == SubmissionStatus.RUNNING)
        .group_by(OWNER)
        .subquery()
    )
    used = (
        select(OWNER.label("owner"), func.sum(Submission.grading_wall_seconds).label("seconds"))
        .where(Submission.graded_at >= since)
        .group_by(OWNER)
        .subquery()
    )
    fairest = (
        select(Submission.id)
        .outerjoin(runs, runs.c.owner == OWNER)
        .outerjoin(used, used.c.owner == OWNER)
        .where(Submission.status == SubmissionStatus.QUEUED)
        .order_by(
            func.coalesce(runs.c.count, 0),
            func.coalesce(used.c.seconds, 0.0),
            Submission.created_at,
        )
        .limit(1)
        .with_for_update(of=Submission, skip_locked=True)
    )
    submission_id = session.scalar(fairest)
    if submission_id is None:
        return None
    return claim_submission(session, submission_id, lease_seconds=lease_seconds)
