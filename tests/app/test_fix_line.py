"""The replayed fix (graders/fix_replay.py) where a learner reads a result: the result page's
chart and the REST answer's `charts_svg`, from a stored result graded here. Neither holds a
number of a hidden case."""

from __future__ import annotations

import httpx

from app.db import SessionFactory
from app.models import Submission
from graders.exercises import get_exercise
from graders.proving import judge_source
from tests.app.conftest import EXERCISE, MISSING_ZERO_GRAD_CODE
from tests.app.people import graded, make_user
from tests.app.test_personal_tokens import bearer, browser, new_token
from tests.graders.test_hidden import betrayed, secrets

# The chart's text alternative names the fixed line and gives its values.
SAID = "Your loop with optimizer.zero_grad() before backward(): "


def test_the_page_and_the_api_draw_the_fixed_loop_and_nothing_hidden(
    server_url: str, sessions: SessionFactory
) -> None:
    exercise = get_exercise(EXERCISE)
    report = judge_source(exercise, MISSING_ZERO_GRAD_CODE)
    assert report.diagnosis == "missing-zero-grad"
    learner = make_user(sessions, "fay@example.org")
    submission_id = graded(
        sessions, user_id=learner, course_id=None, score=report.score, code=MISSING_ZERO_GRAD_CODE
    )
    with sessions.begin() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        row.plots = [plot.model_dump(mode="json") for plot in report.plots]
    hidden_ids = {spec.id for spec in exercise.cases if spec.hidden}
    hidden = set(secrets(exercise)) - hidden_ids  # "momentum" is also a word of the feedback

    with browser(server_url, "fay@example.org") as fay:
        page = fay.get(f"/submissions/{submission_id}")
        assert page.status_code == 200
        secret = new_token(fay)
    assert 'class="fixed"' in page.text and SAID in page.text
    assert "dotted: your own loop replayed with only its mistake fixed" in page.text
    answer = httpx.get(
        f"{server_url}/api/v1/me/submissions/{submission_id}", headers=bearer(secret)
    )
    assert answer.status_code == 200
    drawn = [svg for svg in answer.json()["charts_svg"] if 'class="fixed"' in svg]
    assert drawn and all(SAID in svg for svg in drawn)
    assert not betrayed(hidden, page.text)
    assert not betrayed(hidden, answer.text)
    # The check can fail: the hidden values are found where they are written, beside a clock.
    assert betrayed(hidden, f"at 2026-12-05 11:42 UTC the seed {' '.join(hidden)}") == list(hidden)
