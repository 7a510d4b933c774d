"""A regrade of an exercise says how many submissions it runs and asks first; a learner whose
result it changed is told the old and new score and why. The grading itself is not run here
(tests/app/test_gradebook.py and the browser course flow regrade for real): the rows are
written as the worker leaves them."""

from __future__ import annotations

import html

import httpx
from sqlalchemy import update

from app.db import SessionFactory
from app.grading.regrades import request_exercise_regrade
from app.models import Regrade, RegradeReason, SiteRole, Submission, User, utc_now
from tests.app.conftest import EXERCISE
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS


def _browser(client: httpx.Client, email: str) -> httpx.Client:
    browser = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(browser, email).status_code == 303
    return browser


def _lees_graded_submission(sessions: SessionFactory) -> tuple[str, str]:
    """Tess's course, with Lee's submission graded 4/10 in it: (course id, submission id)."""
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    lee = make_user(sessions, "lee@example.org")
    course_id = make_course(sessions, "tess@example.org", "lee@example.org")
    return course_id, graded(sessions, user_id=lee, course_id=course_id, score=4.0)


def test_regrade_all_says_how_many_and_asks_first(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    lee = make_user(sessions, "lee@example.org")
    ann = make_user(sessions, "ann@example.org")
    course_id = make_course(sessions, "tess@example.org", "lee@example.org", "ann@example.org")
    for user_id in (lee, lee, ann):
        graded(sessions, user_id=user_id, course_id=course_id, score=4.0)
    graded(sessions, user_id=ann, course_id=course_id, score=4.0, exercise="fix-the-loop")
    teacher = _browser(client, "tess@example.org")

    stats = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/stats").text
    assert "regrade?which=all" in stats and 'method="post"' not in stats.split("Regrade")[-1]
    confirm = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/regrade?which=all")
    assert confirm.status_code == 200
    text = " ".join(confirm.text.split())
    assert "This will grade <strong>3 submissions</strong> by 2 learners again" in text
    assert "Regrade 3 submissions</button>" in text
    # Confirmed for another number (one more came in since): asked again, nothing queued.
    graded(sessions, user_id=ann, course_id=course_id, score=5.0)
    stale = teacher.post(
        f"/courses/{course_id}/exercises/{EXERCISE}/regrade",
        data={
            "csrf_token": token_of(confirm),
            "which": "all",
            "expected_count": "3",
            "reason": "grader-updated",
        },
    )
    assert stale.status_code == 409
    assert "changed since the page was opened (now 4)" in stale.text
    assert "Regrade 4 submissions</button>" in stale.text
    assert 'value="grader-updated" required checked' in stale.text  # the choice is kept
    # Without a reason: said on the page (none chosen for the instructor), nothing queued.
    confirm = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/regrade?which=all")
    assert "checked" not in confirm.text.split("<fieldset>", 1)[1].split("</fieldset>", 1)[0]
    unexplained = teacher.post(
        f"/courses/{course_id}/exercises/{EXERCISE}/regrade",
        data={
            "csrf_token": token_of(confirm),
            "which": "all",
            "expected_count": "4",
            "note": "kept",
        },
    )
    assert unexplained.status_code == 422
    assert "Say why you regrade" in unexplained.text and ">kept</textarea>" in unexplained.text
    with sessions() as session:
        assert session.query(Regrade).count() == 0
        assert session.query(Submission).filter_by(status="queued").count() == 0


def test_a_learner_sees_that_a_regrade_changed_their_result_and_why(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, submission_id = _lees_graded_submission(sessions)
    with sessions.begin() as session:
        tess = session.query(User).filter_by(email="tess@example.org").one()
        request_exercise_regrade(
            session,
            course_id=course_id,
            exercise_id=EXERCISE,
            only_outdated=False,
            by=tess,
            reason=RegradeReason.GRADER_UPDATED,
            note="the step check now allows a float32 rounding",
        )
        # As the worker leaves it.
        session.execute(
            update(Regrade).values(
                finished_at=utc_now(),
                new_status="graded",
                new_score=7.0,
                new_max_score=10.0,
                new_diagnosis="wrong-learning-rate",
                new_exercise_version="v-test",
            )
        )
        session.execute(
            update(Submission).values(status="graded", score=7.0, diagnosis="wrong-learning-rate")
        )
    learner = _browser(client, "lee@example.org")
    page = " ".join(learner.get(f"/submissions/{submission_id}").text.split())
    assert "the score went from 4 to <strong>7</strong> of 10" in page
    assert "Gradients not cleared before backward → Wrong learning rate" in page
    assert "Why: The grader was corrected: “the step check now allows a float32 rounding”." in page
    home = " ".join(learner.get(f"/courses/{course_id}").text.split())
    assert "A regrade changed 1 of your results:" in home
    assert "4 → <strong>7</strong>. The grader was corrected" in home
    teacher = _browser(client, "tess@example.org")
    log = html.unescape(" ".join(teacher.get(f"/courses/{course_id}/audit").text.split()))
    assert (
        "Tess had 1 submission of One training step: zero, backward, step graded again: the "
        "grader was corrected (“the step check now allows a float32 rounding”)." in log
    )


def test_one_submission_is_regraded_with_its_reason_and_note(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id, submission_id = _lees_graded_submission(sessions)
    teacher = _browser(client, "tess@example.org")
    page = teacher.get(f"/submissions/{submission_id}")
    form = page.text.split(f'action="/submissions/{submission_id}/regrade"')[1].split("</form>")[0]
    # The same choice of reasons as a regrade of the whole exercise, "on request" first.
    assert form.count('type="radio" name="reason"') == len(RegradeReason)
    # No reason is chosen for the instructor, and one is required.
    assert "checked" not in form
    assert form.count(" required ") == len(RegradeReason)
    assert 'name="note"' in form
    regrade = f"/submissions/{submission_id}/regrade"

    # A reason that is not one, or a note too long: said on the page, nothing queued.
    for data, said in (
        ({}, "say why you regrade"),
        ({"reason": "because"}, "say why you regrade"),
        ({"reason": "grader-updated", "note": "x" * 501}, "at most 500 characters"),
    ):
        refused = teacher.post(regrade, data={"csrf_token": token_of(page), **data})
        assert refused.status_code == 422, refused.text
        assert said in refused.text
        with sessions() as session:
            assert session.query(Regrade).count() == 0
            submission = session.get(Submission, submission_id)
            assert submission is not None and submission.status == "graded"

    done = teacher.post(
        regrade,
        data={"csrf_token": token_of(page), "reason": "grader-updated", "note": " a fix "},
    )
    assert done.status_code == 303, done.text
    with sessions() as session:
        (row,) = session.query(Regrade).all()
        assert (row.reason, row.note) == (RegradeReason.GRADER_UPDATED, "a fix")
        assert row.submission_id == submission_id
    log = html.unescape(" ".join(teacher.get(f"/courses/{course_id}/audit").text.split()))
    assert "graded again (it had 4): the grader was corrected (“a fix”)" in log
