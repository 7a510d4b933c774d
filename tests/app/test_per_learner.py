"""Per-learner cases through the app: the grader is told whose submission it grades, from the
stored owner, at every claim: two learners get different visible numbers, a regrade the same
ones again, a dry run of the regrade too, and anonymous practice the declared cases."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, update

from app.db import SessionFactory
from app.grading.dry_runs import _claim as claim_dry_run
from app.grading.dry_runs import request_dry_run
from app.grading.jobs import claim_submission
from app.grading.queue import run_grading_job
from app.grading.regrades import request_regrade
from app.models import DryRunGrade, RegradeReason, SiteRole, Submission, SubmissionStatus, User
from app.settings import Settings
from graders import exercises
from graders.exercises import get_exercise
from tests.app.conftest import MISSING_ZERO_GRAD_CODE
from tests.app.people import make_course, make_user

REPO_EXERCISES = Path(__file__).resolve().parents[2] / "exercises"


@pytest.fixture
def per_learner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """train-step with per-learner visible cases, in a copy of the exercises."""
    copy = tmp_path / "exercises"
    shutil.copytree(REPO_EXERCISES, copy)
    toml = copy / "train-step" / "exercise.toml"
    toml.write_text(
        toml.read_text().replace("\n[checks]", '\ncase_seeds = "per-learner"\n\n[checks]', 1)
    )
    monkeypatch.setattr(exercises, "EXERCISES_DIR", copy)
    exercises._loaded.cache_clear()
    yield
    exercises._loaded.cache_clear()


def queued(sessions: SessionFactory, user_id: str | None, course_id: str | None) -> str:
    with sessions.begin() as session:
        row = Submission(
            exercise_id="train-step",
            exercise_version=get_exercise("train-step").version,
            learner="someone",
            code=MISSING_ZERO_GRAD_CODE,
            user_id=user_id,
            course_id=course_id,
            client_address=None if user_id else "127.0.0.9",
        )
        session.add(row)
        session.flush()
        return row.id


def graded_plots(sessions: SessionFactory, settings: Settings, submission_id: str) -> object:
    run_grading_job(sessions, submission_id, settings)
    with sessions() as session:
        row = session.get(Submission, submission_id)
        assert row is not None and row.status == SubmissionStatus.GRADED, row and row.error_message
        assert row.diagnosis == "missing-zero-grad"
        return row.plots


def test_each_learner_is_graded_on_their_own_cases_every_time(
    per_learner: None, sessions: SessionFactory, settings: Settings
) -> None:
    teacher = make_user(sessions, "teach@example.org", SiteRole.INSTRUCTOR)
    ada = make_user(sessions, "ada@example.org")
    bob = make_user(sessions, "bob@example.org")
    course_id = make_course(sessions, "teach@example.org", "ada@example.org", "bob@example.org")
    ada_submission = queued(sessions, ada, course_id)
    ada_plots = graded_plots(sessions, settings, ada_submission)
    bob_plots = graded_plots(sessions, settings, queued(sessions, bob, course_id))
    anonymous_plots = graded_plots(sessions, settings, queued(sessions, None, None))
    assert ada_plots and bob_plots and ada_plots != bob_plots
    assert anonymous_plots not in (ada_plots, bob_plots)
    # The same learner's next submission, and a regrade of the first: the same numbers.
    assert graded_plots(sessions, settings, queued(sessions, ada, course_id)) == ada_plots
    with sessions.begin() as session:
        row = session.get(Submission, ada_submission)
        instructor = session.get(User, teacher)
        assert row is not None and instructor is not None
        request_regrade(session, row, by=instructor, reason=RegradeReason.GRADER_UPDATED)
    assert graded_plots(sessions, settings, ada_submission) == ada_plots


def test_the_claims_name_the_owner_and_anonymous_practice_no_one(
    per_learner: None, sessions: SessionFactory
) -> None:
    teacher = make_user(sessions, "teach@example.org", SiteRole.INSTRUCTOR)
    ada = make_user(sessions, "ada@example.org")
    course_id = make_course(sessions, "teach@example.org", "ada@example.org")
    ada_submission, anonymous_submission = (
        queued(sessions, ada, course_id),
        queued(sessions, None, None),
    )
    with sessions.begin() as session:
        mine = claim_submission(session, ada_submission, lease_seconds=60)
        anonymous = claim_submission(session, anonymous_submission, lease_seconds=60)
    assert mine is not None and mine.learner_key == f"user:{ada}"
    assert anonymous is not None and anonymous.learner_key is None
    with sessions.begin() as session:
        session.execute(
            update(Submission).values(status=SubmissionStatus.GRADED, score=0.0, max_score=10.0)
        )
        instructor = session.get(User, teacher)
        assert instructor is not None
        request_dry_run(
            session,
            course_id=course_id,
            exercise_id="train-step",
            only_outdated=False,
            by=instructor,
        )
    with sessions.begin() as session:
        row_id = session.execute(select(DryRunGrade.id)).scalar_one()
        dry_run = claim_dry_run(session, row_id, lease_seconds=60)
    assert dry_run is not None and dry_run.learner_key == f"user:{ada}"
