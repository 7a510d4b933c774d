"""What grade passback sends after an instructor's override (the counted-score rule)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.courses.extensions import set_extension
from app.courses.membership import set_assignment
from app.courses.overrides import CountedChange, set_override
from app.db import SessionFactory
from app.integrations.ags import LTI_SCORE_KIND, deliver_score
from app.integrations.ags_client import AccessTokens
from app.integrations.keys import key_sealing
from app.integrations.models import LtiContext, LtiUser
from app.models import (
    LatePolicy,
    OutboxMessage,
    ScoringPolicy,
    SiteRole,
    Submission,
    User,
    utc_now,
)
from app.settings import Settings
from tests.app.people import graded, make_user
from tests.lti.conftest import Launch
from tests.lti.fake_platform import FakePlatform


def lti_scores_queued(sessions: SessionFactory) -> list[float]:
    with sessions() as session:
        rows = session.scalars(
            select(OutboxMessage).where(OutboxMessage.kind == LTI_SCORE_KIND).order_by("id")
        )
        return [row.payload["score_given"] for row in rows]


def override(
    sessions: SessionFactory, submission_id: str, score: float, *, by: str
) -> CountedChange:
    with sessions.begin() as session:
        teacher = session.get(User, by)
        submission = session.get(Submission, submission_id)
        assert teacher is not None and submission is not None
        return set_override(session, submission, score=score, reason="partial credit", by=teacher)


def test_an_override_of_an_older_attempt_sends_the_better_solve(
    launch: Launch, platform: FakePlatform, sessions: SessionFactory, settings: Settings
) -> None:
    assert launch().status_code == 303
    teacher_id = make_user(sessions, "teacher@example.org", SiteRole.INSTRUCTOR)
    with sessions() as session:
        user_id = session.scalars(select(LtiUser.user_id)).one()
        course_id = session.scalars(select(LtiContext.course_id)).one()
    now = utc_now()
    older = graded(
        sessions, user_id=user_id, course_id=course_id, score=3, created_at=now - timedelta(hours=1)
    )
    solve = graded(sessions, user_id=user_id, course_id=course_id, score=10, created_at=now)
    queued_before = len(lti_scores_queued(sessions))

    # "Partial credit" on the older 3/10: the 10/10 still counts, and the LMS is sent 10.
    change = override(sessions, older, 7, by=teacher_id)
    assert (change.before, change.after) == (10, 10)
    sent = lti_scores_queued(sessions)[queued_before:]
    assert sent == [10.0]
    with sessions() as session:
        message = session.scalars(
            select(OutboxMessage)
            .where(OutboxMessage.kind == LTI_SCORE_KIND)
            .order_by(OutboxMessage.id.desc())
        ).first()
        assert message is not None
        deliver_score(session, key_sealing(settings), AccessTokens(), message.payload)
    (stored,) = platform.scores["1"].values()
    assert (stored.user_id, stored.score_given, stored.score_maximum) == ("learner-1", 10.0, 10.0)

    # An override of the counted attempt itself does lower it: to the best left, 7.
    change = override(sessions, solve, 5, by=teacher_id)
    assert (change.before, change.after) == (10, 7)
    assert lti_scores_queued(sessions)[-1] == 7.0


def test_an_extension_that_lifts_a_late_penalty_sends_the_new_counted_score(
    launch: Launch, platform: FakePlatform, sessions: SessionFactory, settings: Settings
) -> None:
    assert launch().status_code == 303
    teacher_id = make_user(sessions, "teacher@example.org", SiteRole.INSTRUCTOR)
    with sessions() as session:
        user_id = session.scalars(select(LtiUser.user_id)).one()
        course_id = session.scalars(select(LtiContext.course_id)).one()
    exercise_id = "train-step"  # the platform's link's exercise
    with sessions.begin() as session:
        set_assignment(
            session,
            course_id=course_id,
            exercise_id=exercise_id,
            assigned=True,
            due_at=utc_now() - timedelta(hours=2),
            late_policy=LatePolicy.PENALTY,
            late_penalty_percent_per_day=50.0,
            scoring_policy=ScoringPolicy.BEST,
        )
    graded(
        sessions,
        user_id=user_id,
        course_id=course_id,
        score=10,
        exercise=exercise_id,
        created_at=utc_now() - timedelta(hours=1),
    )
    queued_before = len(lti_scores_queued(sessions))
    with sessions.begin() as session:
        change = set_extension(
            session,
            course_id=course_id,
            exercise_id=exercise_id,
            learner=session.get_one(User, user_id),
            due_at=utc_now() + timedelta(days=1),
            extra_attempts=0,
            extra_minutes=0,
            by=session.get_one(User, teacher_id),
        )
    assert (change.counted_before, change.counted_after) == (5, 10)
    # The LMS is sent the learner's counted score under their own due date: 10, not 5.
    assert lti_scores_queued(sessions)[queued_before:] == [10.0]
