"""A fair share across Celery workers on PostgreSQL (issue 34, item 4): a message is a wake-up,
and the worker claims the queued submission owed the most (app/grading/fair_claim.py).

Which submission is claimed first is asserted, never how long anything took."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from sqlalchemy import update

from app.db import SessionFactory
from app.grading.fair_claim import claim_fairest_submission
from app.grading.jobs import GradingJob
from app.grading.submissions import create_submission
from app.models import Submission, SubmissionStatus, utc_now
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.hosts.conftest import Worker
from tests.hosts.test_faults import all_finished, rows, submit, wait_for

LEASE_SECONDS = 60.0
# Holds its slot asleep (wall time, no CPU) while its code loads; loaded again for the hidden
# cases, it is stopped there at their blocked budget (a timeout).
SLEEPING_CODE = "import time\ntime.sleep(4)\n" + CORRECT_CODE


def queue(sessions: SessionFactory, *learners: str) -> list[str]:
    """One queued submission per learner named, oldest first."""
    ids = []
    for learner in learners:
        with sessions.begin() as session:
            ids.append(
                create_submission(
                    session, exercise_id=EXERCISE, learner=learner, code=CORRECT_CODE
                ).id
            )
    return ids


def claim(sessions: SessionFactory) -> GradingJob | None:
    with sessions.begin() as session:
        return claim_fairest_submission(session, lease_seconds=LEASE_SECONDS)


def test_the_owner_with_fewer_runs_then_less_slot_time_goes_first(
    sessions: SessionFactory,
) -> None:
    a1, a2, b1 = queue(sessions, "A", "A", "B")
    first, second, third = claim(sessions), claim(sessions), claim(sessions)
    # A tie (no runs, no use): the oldest. Then B, who has no run, before A's second.
    assert [job and job.submission_id for job in (first, second, third)] == [a1, b1, a2]
    assert claim(sessions) is None

    # Nothing runs now; A held slots for 30 s lately, C for none: C's newer one goes first.
    with sessions.begin() as session:
        session.execute(
            update(Submission)
            .where(Submission.id.in_([a1, a2, b1]))
            .values(status=SubmissionStatus.GRADED, graded_at=utc_now(), grading_wall_seconds=0.0)
        )
        session.execute(
            update(Submission).where(Submission.id == a1).values(grading_wall_seconds=30.0)
        )
    a3, c1 = queue(sessions, "A", "C")
    assert [job and job.submission_id for job in (claim(sessions), claim(sessions))] == [c1, a3]


def test_workers_choosing_at_once_take_different_submissions(sessions: SessionFactory) -> None:
    first_id, second_id = queue(sessions, "A", "B")
    # The first claim's transaction is still open (its row locked) when the second chooses.
    with sessions.begin() as holding:
        first = claim_fairest_submission(holding, lease_seconds=LEASE_SECONDS)
        second = claim(sessions)
    assert first is not None and second is not None
    assert {first.submission_id, second.submission_id} == {first_id, second_id}


def test_one_learner_s_sleeping_submissions_do_not_hold_back_another_s_on_the_workers(
    api: httpx.Client,
    auth: dict[str, str],
    sessions: SessionFactory,
    start_worker: Callable[..., Worker],
) -> None:
    """Two grading threads; A's three sleepers are queued before B's correct one. First come,
    first served, B would wait for two of them; fairly, B goes before A's last."""
    sleepers = [submit(api, auth, "learner-a", SLEEPING_CODE) for _ in range(3)]
    honest = submit(api, auth, "learner-b")
    start_worker(LOOPGRADE_WORKER_COUNT="2", LOOPGRADE_SANDBOX_POOL_SIZE="0")
    ids = [*sleepers, honest]
    wait_for(lambda: all_finished(sessions, ids), "every submission graded")
    graded = rows(sessions, ids)
    assert (graded[honest].diagnosis, graded[honest].score) == ("correct", graded[honest].max_score)
    for row in graded.values():
        assert row.status == "graded", row.id
        assert row.grading_wall_seconds is not None and row.grading_wall_seconds > 0
    started = {submission_id: graded[submission_id].started_at for submission_id in ids}
    assert all(at is not None for at in started.values())
    last_sleeper_started = max(started[submission_id] or utc_now() for submission_id in sleepers)
    assert (started[honest] or utc_now()) < last_sleeper_started
