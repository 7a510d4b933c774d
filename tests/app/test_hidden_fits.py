"""Invariant 5 through the app: code that deviates in a hidden case alone, by an amount taken
from that case, gets the same API answer and result page whichever hidden number it used, and
neither holds a number derived from a hidden case (tests/graders/test_hidden_fits.py has the
submissions and every model; this is the path from the grader to the learner)."""

from __future__ import annotations

import re
import time

import httpx

from app.db import SessionFactory
from graders.exercises import get_exercise
from tests.app.conftest import GRADING_TIMEOUT_SECONDS, wait_until_finished
from tests.app.people import make_course, make_user, sign_in, token_of
from tests.graders.test_hidden_fits import DEVIATIONS, KEYS, assert_no_hidden_text, source

EXERCISE = get_exercise("train-step")
# Scaled updates in the first hidden case, nothing done elsewhere: before notes were fitted on
# the visible cases alone, the feedback said "Your updates are 1.35 times the size...".
SOURCES = {
    key: source(DEVIATIONS["updates scaled (learning rate times k)"][1], key, EXERCISE, "clears")
    for key in KEYS
}
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# What an answer says about the grading, not about the submission or when it was made.
REPORT_FIELDS = (
    "score",
    "max_score",
    "diagnosis",
    "checks",
    "feedback",
    "hint_count",
    "first_hint",
)


def test_the_api_answer_holds_no_hidden_number(client: httpx.Client, auth: dict[str, str]) -> None:
    answers = {}
    for key, code in SOURCES.items():
        posted = client.post(
            "/api/v1/submissions",
            headers=auth,
            json={"exercise": EXERCISE.id, "learner": f"learner-{key}", "code": code},
        )
        assert posted.status_code == 202, posted.text
        answers[key] = (posted.headers["location"], None)
    graded = {
        key: wait_until_finished(client, location, auth, statuses=("graded", "error"))
        for key, (location, _) in answers.items()
    }
    for answer in graded.values():
        assert answer["status"] == "graded"
        assert answer["score"] < answer["max_score"]
        report = {name: answer[name] for name in REPORT_FIELDS}
        assert_no_hidden_text(EXERCISE, str(report))
    first, second = ({n: a[n] for n in REPORT_FIELDS} for a in graded.values())
    assert first == second


def test_the_result_page_holds_no_hidden_number(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.edu")
    make_user(sessions, "lena@example.edu")
    course_id = make_course(sessions, "tess@example.edu", "lena@example.edu")
    assert sign_in(client, "lena@example.edu").status_code == 303
    page = f"/courses/{course_id}/exercises/{EXERCISE.id}"
    results = []
    for code in SOURCES.values():
        posted = client.post(page, data={"code": code, "csrf_token": token_of(client.get(page))})
        assert posted.status_code == 303, posted.text
        submission = posted.headers["location"]
        deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
        while 'data-finished="true"' not in (result := client.get(f"{submission}/result")).text:
            assert time.monotonic() < deadline, "still not graded"
            time.sleep(0.2)
        assert "It fails in a hidden case too." in result.text
        assert_no_hidden_text(EXERCISE, result.text)
        # The hints too, opened to the last level, with their lesson link (the rest of the
        # page holds times and line numbers, which the result above is checked without).
        for level in ("1", "2", "3"):
            client.post(
                f"{submission}/hints",
                data={"level": level, "csrf_token": token_of(client.get(submission))},
            )
        hints = client.get(submission).text.split('id="hints"')[1].split("</section>")[0]
        assert hints.count('id="hint-') == 3
        assert_no_hidden_text(EXERCISE, hints)
        results.append(re.sub(UUID, "", result.text))
    assert results[0] == results[1]
