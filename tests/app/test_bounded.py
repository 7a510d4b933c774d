"""Bounded output: no page or API answer grows with what a submission made its trace say.

A forged trace once made a 215 MiB submission page. Here the results are forged straight into
the database (each part alone far larger than a page may be) and made by a real sandbox run,
and every page and API answer that shows them is measured.
"""

from __future__ import annotations

import textwrap
import time

import httpx
from sqlalchemy import update

from app.api.keys import create_api_key
from app.db import SessionFactory
from app.grading.results import MAX_SERIES_POINTS
from app.models import SiteRole, Submission
from tests.app.conftest import EXERCISE, GRADING_TIMEOUT_SECONDS, REPO, csrf_token
from tests.app.people import graded, make_course, make_user, sign_in

MAX_ANSWER_BYTES = 300 * 1024
# A forged series of 100 times the points a stored one keeps (MAX_SERIES_POINTS): drawn whole or
# sent whole it alone would be megabytes, far over MAX_ANSWER_BYTES. (More points only cost the
# test CPU: every page parses the whole row.)
FORGED_SERIES_POINTS = 100 * MAX_SERIES_POINTS
# Every character of these needs escaping in HTML, and some in JSON: the worst case of size.
HOSTILE_TEXT = "&<\"'\\"


def hostile(chars: int) -> str:
    return (HOSTILE_TEXT * (chars // len(HOSTILE_TEXT) + 1))[:chars]


def forge(sessions: SessionFactory, submission_id: str) -> None:
    """Make the stored result as large as anything could make it."""
    long_series = [float(step % 7) for step in range(FORGED_SERIES_POINTS)]
    with sessions.begin() as session:
        session.execute(
            update(Submission)
            .where(Submission.id == submission_id)
            .values(
                feedback=hostile(2_000_000),
                checks=[
                    {
                        "id": hostile(1000),
                        "passed": False,
                        "points": 0,
                        "max_points": 1,
                        "message": hostile(10_000),
                        "hidden": False,
                    }
                ]
                * 200,
                plots=[
                    {
                        "case": hostile(5000),
                        "label": "loss",
                        "learner": long_series,
                        "reference": long_series,
                    },
                    *[
                        {
                            "case": "c",
                            "label": hostile(5000),
                            "learner": [1.0] * 5000,
                            "reference": [2.0] * 5000,
                        }
                    ]
                    * 20,
                ],
                output=hostile(2_000_000),
                upload_filename="step.ipynb",
                upload_notices=[hostile(2000)] * 1000,
            )
        )


def assert_small(response: httpx.Response) -> None:
    assert response.status_code == 200, (response.url, response.text[:500])
    assert len(response.content) < MAX_ANSWER_BYTES, (response.url, len(response.content))


def test_pages_and_answers_stay_small_whatever_is_stored(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.edu", SiteRole.INSTRUCTOR)
    learner_id = make_user(sessions, "lena@example.edu")
    course_id = make_course(sessions, "tess@example.edu", "lena@example.edu")
    submission_id = graded(sessions, user_id=learner_id, course_id=course_id, score=3)
    forge(sessions, submission_id)
    with sessions.begin() as session:
        _, secret = create_api_key(session, name="lms", course_id=course_id)
    auth = {"Authorization": f"Bearer {secret}"}

    for path in (
        f"/api/v1/submissions/{submission_id}",
        "/api/v1/submissions",
        "/api/v1/gradebook",
    ):
        assert_small(client.get(path, headers=auth))

    learner_pages = (
        f"/submissions/{submission_id}",
        f"/submissions/{submission_id}/result",
        "/history",
        f"/courses/{course_id}",
        f"/courses/{course_id}/exercises/{EXERCISE}",
        f"/courses/{course_id}/exercises/{EXERCISE}?edit={submission_id}",
    )
    assert sign_in(client, "lena@example.edu").status_code == 303
    for path in learner_pages:
        assert_small(client.get(path))
    page = client.get(f"/submissions/{submission_id}")
    assert "more characters cut" in page.text
    assert page.text.count("<svg") <= 8

    client.cookies.clear()
    assert sign_in(client, "tess@example.edu").status_code == 303
    for path in (
        f"/submissions/{submission_id}",
        f"/courses/{course_id}/gradebook",
        f"/courses/{course_id}/gradebook.csv",
        f"/courses/{course_id}/submissions",
        f"/courses/{course_id}/exercises/{EXERCISE}/stats",
        f"/courses/{course_id}/exercises/{EXERCISE}/map",
    ):
        assert_small(client.get(path))


WHOLE_LOOP = (REPO / "exercises" / "fix-the-loop" / "solution.py").read_text()


def test_a_real_run_that_returns_and_prints_a_lot_makes_a_small_page(
    client: httpx.Client,
) -> None:
    # The harness keeps at most 10,000 losses; 10 KB printed per case stays under the output cap.
    code = WHOLE_LOOP.replace(
        "    return losses",
        textwrap.indent(
            f"print({HOSTILE_TEXT!r} * 2000)\n"
            "return losses + [float(i % 5) for i in range(10_000)]\n",
            "    ",
        ),
    )
    page = "/exercises/fix-the-loop"
    posted = client.post(page, data={"code": code, "csrf_token": csrf_token(client, page)})
    assert posted.status_code == 303, posted.text
    submission_path = posted.headers["location"]
    deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
    while 'data-finished="true"' not in (result := client.get(f"{submission_path}/result")).text:
        assert time.monotonic() < deadline, "still not graded"
        time.sleep(0.2)
    assert "<svg" in result.text, result.text[:2000]
    for path in (submission_path, f"{submission_path}/result", "/history", page):
        assert_small(client.get(path))


def test_a_cut_message_never_leaves_a_code_span_or_block_open() -> None:
    """Cut inside a fenced traceback the block is closed; inside a code span, the span is left
    out: the rest of the page is never rendered as code."""
    from app.grading.results import cut_markdown
    from graders.feedback import learner_text

    traceback = "Traceback (most recent call last):\n" + '  File "x.py", line 1\n' * 200
    message = f"Your code raised {learner_text('ValueError')}: boom\n\n" + learner_text(
        traceback, block=True
    )
    cut = cut_markdown(message, 1000)
    assert len(cut) <= 1000 and cut.endswith("more characters cut)")
    assert cut.count("```") == 2  # the block opened, and closed before the note
    assert cut.split("```")[-1].startswith("\n…")
    spans = cut_markdown("word " * 150 + learner_text("x" * 900) + " after", 1000)
    assert spans.count("`") == 0 and spans.startswith("word word")
    assert cut_markdown("short `code`", 1000) == "short `code`"
