"""The practice pages, over HTTP (tests/browser drives them in a real browser)."""

from __future__ import annotations

import html
import re
import time

import httpx
import pytest
from sqlalchemy import select

from app.access import LEARNER_COOKIE
from app.db import SessionFactory
from app.models import Submission, SubmissionStatus, utc_now
from app.settings import Settings
from graders.exercises import get_exercise, list_exercises
from tests.app.conftest import (
    CORRECT_CODE,
    EXERCISE,
    GRADING_TIMEOUT_SECONDS,
    MISSING_ZERO_GRAD_CODE,
    csrf_token,
)


def test_index_lists_the_exercises(client: httpx.Client) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert f'href="/exercises/{EXERCISE}"' in page.text
    assert get_exercise(EXERCISE).title in page.text


def test_exercise_page_has_prompt_editor_and_is_framed_only_by_registered_platforms(
    client: httpx.Client,
) -> None:
    page = client.get(f"/exercises/{EXERCISE}")
    assert page.status_code == 200
    assert "x-frame-options" not in page.headers
    # No LMS platform is registered here: only this site may frame it (tests/lti: platforms).
    assert "frame-ancestors 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors *" not in page.headers["content-security-policy"]
    # The prompt is rendered from markdown, not shown raw.
    assert "<code>train_step(model, optimizer, loss_fn, x, y)</code>" in page.text
    assert "# One training step" not in page.text
    textarea = re.search(r'<textarea id="code" name="code"[^>]*>(.*?)</textarea>', page.text, re.S)
    assert textarea is not None
    assert "def train_step(model, optimizer, loss_fn, x, y):" in textarea[1]
    assert '<label for="code" id="your-code">' in page.text
    assert '<button type="submit">' in page.text
    assert "<script>" not in page.text  # scripts are files, allowed by the CSP


@pytest.mark.parametrize("exercise_id", [e.id for e in list_exercises()])
def test_every_exercise_page_renders_its_prompt_and_starter(
    client: httpx.Client, exercise_id: str
) -> None:
    exercise = get_exercise(exercise_id)
    page = client.get(f"/exercises/{exercise_id}")
    assert page.status_code == 200
    assert html.escape(exercise.title, quote=False) in page.text
    textarea = re.search(r'<textarea id="code" name="code"[^>]*>(.*?)</textarea>', page.text, re.S)
    assert textarea is not None
    first_def = next(line for line in exercise.starter_code.splitlines() if line.startswith("def "))
    assert first_def in html.unescape(textarea[1])
    # The prompt's headings are rendered, not shown as markdown.
    assert "\n## " not in page.text


def test_unknown_exercise_page_is_404(client: httpx.Client) -> None:
    assert client.get("/exercises/no-such-exercise").status_code == 404


def test_form_errors_rerender_with_a_message(client: httpx.Client, settings: Settings) -> None:
    token = csrf_token(client, f"/exercises/{EXERCISE}")
    empty = client.post(f"/exercises/{EXERCISE}", data={"code": "   ", "csrf_token": token})
    assert empty.status_code == 422
    # The page lands on the message (land-focus.js), which says it once: no alert as well.
    message = re.search(r'<p class="form-error" id="form-error"([^>]*)>([^<]*)</p>', empty.text)
    assert message is not None and "code is empty" in message[2]
    assert "data-land-focus" in message[1] and 'role="alert"' not in message[1]

    too_large = "# padding\n" * (settings.max_code_bytes // 10 + 1)
    large = client.post(f"/exercises/{EXERCISE}", data={"code": too_large, "csrf_token": token})
    assert large.status_code == 413
    assert f"the limit is {settings.max_code_bytes} bytes" in large.text
    # The learner's code is kept in the editor, to trim rather than retype.
    assert large.text.count("# padding") > 1000


def test_submit_from_the_page_and_see_the_result(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    token = csrf_token(client, f"/exercises/{EXERCISE}")
    # Browsers send a textarea's lines with CRLF.
    posted = client.post(
        f"/exercises/{EXERCISE}",
        data={"code": CORRECT_CODE.replace("\n", "\r\n"), "csrf_token": token},
    )
    assert posted.status_code == 303
    location = posted.headers["location"]
    assert re.fullmatch(r"/submissions/[0-9a-f-]{36}", location)
    learner = client.cookies[LEARNER_COOKIE]
    assert learner.startswith("web:")
    # The same browser stays the same learner.
    again = client.post(
        f"/exercises/{EXERCISE}", data={"code": MISSING_ZERO_GRAD_CODE, "csrf_token": token}
    )
    assert again.status_code == 303
    with sessions() as session:
        learners = session.scalars(select(Submission.learner)).all()
    assert learners == [learner, learner]

    page = client.get(location)
    assert page.status_code == 200
    # The page's live region (result.js fills it) is apart from the result, which is none.
    assert 'id="result"' in page.text and 'id="result-announcement"' in page.text
    assert 'aria-live="polite"' not in page.text
    assert "result.js" in page.text
    if 'data-finished="false"' in page.text:
        assert '<meta http-equiv="refresh"' in page.text  # the no-JavaScript fallback

    # What the page's script does: fetch the result fragment until it says it is finished.
    deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
    while 'data-finished="true"' not in (fragment := client.get(f"{location}/result")).text:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    with sessions() as session:
        row = session.get(Submission, location.rsplit("/", 1)[1])
        assert row is not None
        assert row.code == CORRECT_CODE
    assert row.status == "graded"
    assert f"{row.score:g} / {row.max_score:g}" in fragment.text
    assert 'class="diagnosis diagnosis-ok" data-code="correct">Correct</span>' in fragment.text
    assert fragment.text.count('<tr class="passed">') == len(row.checks or [])
    assert fragment.text.count('<svg class="chart"') == len(row.plots or [])

    final = client.get(location)
    assert '<meta http-equiv="refresh"' not in final.text
    edit_link = f"/exercises/{EXERCISE}?edit={row.id}"
    assert edit_link in final.text
    assert "optimizer.step()" in client.get(edit_link).text  # not in the starter code


def test_result_shows_hidden_checks_and_escapes_feedback(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    with sessions.begin() as session:
        row = Submission(
            exercise_id=EXERCISE,
            exercise_version="v",
            learner="web:someone-anonymous-1",
            code="print('<b>hi</b>')",
            status=SubmissionStatus.GRADED,
            attempts=1,
            score=3,
            max_score=10,
            diagnosis="missing-zero-grad",
            checks=[
                {"id": "runs", "passed": True, "points": 3, "max_points": 3, "message": "ran"},
                {
                    "id": "weights-match",
                    "passed": False,
                    "points": 0,
                    "max_points": 7,
                    "message": "weights drift <from step 2> in `w.grad <b>`",
                    "hidden": True,
                },
            ],
            feedback="Call **`optimizer.zero_grad()`** first. <script>alert(1)</script>",
            output="loss <0.25>\n",
            plots=[{"case": "basic", "label": "loss", "learner": [2.0, None], "reference": [2, 1]}],
            graded_at=utc_now(),
        )
        session.add(row)
        session.flush()
        submission_id = row.id

    # Only the browser that made it sees it.
    assert client.get(f"/submissions/{submission_id}").status_code == 404
    client.cookies.set(LEARNER_COOKIE, "web:someone-anonymous-1")
    page = client.get(f"/submissions/{submission_id}")
    assert page.status_code == 200
    assert "3 / 10" in page.text
    # The diagnosis in words, its code kept for scripts.
    assert 'data-code="missing-zero-grad">Gradients not cleared before backward</span>' in page.text
    assert "<strong><code>optimizer.zero_grad()</code></strong>" in page.text
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    # A check's message: its code spans as code, everything escaped.
    assert "weights drift &lt;from step 2&gt; in <code>w.grad &lt;b&gt;</code>" in page.text
    assert page.text.count(">hidden</span>") == 1
    assert "loss &lt;0.25&gt;" in page.text
    assert page.text.count('<svg class="chart"') == 1
    assert "print(&#39;&lt;b&gt;hi&lt;/b&gt;&#39;)" in page.text
    assert '<meta http-equiv="refresh"' not in page.text


def test_unknown_submission_page_is_404(client: httpx.Client) -> None:
    assert client.get("/submissions/nope").status_code == 404
    assert client.get("/submissions/nope/result").status_code == 404


def test_upload_a_notebook_from_the_page_and_see_what_was_left_out(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    import json

    cells = [
        {"cell_type": "markdown", "source": "# My step", "metadata": {}},
        {
            "cell_type": "code",
            "source": "%matplotlib inline\nimport torch",
            "metadata": {},
            "outputs": [],
        },
        {"cell_type": "code", "source": CORRECT_CODE, "metadata": {}, "outputs": []},
    ]
    notebook = json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})
    page = f"/exercises/{EXERCISE}"
    posted = client.post(
        page,
        data={"code": "ignored: the file wins", "csrf_token": csrf_token(client, page)},
        files={"file": ("step.ipynb", notebook.encode(), "application/x-ipynb+json")},
    )
    assert posted.status_code == 303, posted.text
    result = client.get(posted.headers["location"])
    assert "uploaded as <code>step.ipynb</code>" in result.text
    assert "Left out of your notebook" in result.text and "%matplotlib inline" in result.text
    with sessions() as session:
        row = session.scalars(select(Submission)).one()
    assert "def train_step" in row.code and "ignored" not in row.code
    assert row.upload_notices and "Cell 2, line 1" in row.upload_notices[0]

    for name, data, message in (
        ("step.txt", b"x = 1", "neither a .py file nor a .ipynb notebook"),
        ("broken.ipynb", b'{"cells": [', "not valid notebook JSON"),
        ("latin.py", "x = 'é'".encode("latin-1"), "not UTF-8"),
    ):
        refused = client.post(
            page,
            data={"code": "", "csrf_token": csrf_token(client, page)},
            files={"file": (name, data, "application/octet-stream")},
        )
        assert refused.status_code == 422 and message in refused.text, name
        assert "data-land-focus" in refused.text  # the page lands on the message


def test_the_practice_page_shows_the_unit_in_order_with_states(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    page = client.get(f"/exercises/{EXERCISE}")
    strip = page.text.split('aria-label="The unit\'s exercises"', 1)[1].split("</nav>", 1)[0]
    assert strip.count("<li") == strip.count("Not started") == len(list_exercises())
    assert 'aria-current="page"' in strip
    ids = re.findall(r'href="/exercises/([a-z-]+)"', strip)
    assert ids == [e.id for e in list_exercises()]
