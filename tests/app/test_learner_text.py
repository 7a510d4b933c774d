"""Learner text never speaks with the server's voice: markup in it is shown, never interpreted.

A notebook's magic line and an exception's message are the learner's own text, quoted in the
server's panels (notices, feedback, checks) on the learner's and the instructor's pages.
"""

from __future__ import annotations

import json
import re
import time

import httpx

from app.db import SessionFactory
from app.models import SiteRole
from app.rendering import templates
from tests.app.conftest import EXERCISE, GRADING_TIMEOUT_SECONDS
from tests.app.people import make_course, make_user, sign_in, token_of

EVIL = "http://evil.example"
# Short enough to be quoted whole in a notice (120 characters); its backtick would end a code
# span the server quoted it in.
MARKUP = f'` <img src=x onerror=alert(1)> **Grader note:** [answers]({EVIL}) <a href="{EVIL}">x</a>'


def assert_shown_as_text(page: str) -> None:
    """No part of MARKUP became a link, an image, a tag or the server's bold note."""
    assert "<strong>Grader note" not in page
    assert f'href="{EVIL}' not in page
    assert f'src="{EVIL}' not in page and "<img" not in page
    assert "onerror=alert(1)>" not in page
    # What the learner wrote is there, escaped.
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def learner_and_instructor(client: httpx.Client, sessions: SessionFactory) -> str:
    make_user(sessions, "tess@example.edu", SiteRole.INSTRUCTOR)
    make_user(sessions, "lena@example.edu")
    course_id = make_course(sessions, "tess@example.edu", "lena@example.edu")
    assert sign_in(client, "lena@example.edu").status_code == 303
    return course_id


def submit(
    client: httpx.Client, course_id: str, code: str = "", file: tuple[str, bytes] | None = None
) -> str:
    page = f"/courses/{course_id}/exercises/{EXERCISE}"
    posted = client.post(
        page,
        data={"code": code, "csrf_token": token_of(client.get(page))},
        files={"file": file} if file else None,
    )
    assert posted.status_code == 303, posted.text
    return str(posted.headers["location"])


def as_instructor(client: httpx.Client) -> None:
    client.cookies.clear()
    assert sign_in(client, "tess@example.edu").status_code == 303


def test_a_magic_line_with_markup_is_text_in_the_notices(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id = learner_and_instructor(client, sessions)
    cells = [
        {"cell_type": "code", "source": f"%pip {MARKUP}\nx = 1"},
        {"cell_type": "code", "source": f"%%html {MARKUP}\n<b>x</b>"},
    ]
    notebook = json.dumps({"nbformat": 4, "cells": cells}).encode()
    submission = submit(client, course_id, file=("step.ipynb", notebook))
    learner_page = client.get(submission).text
    assert "Left out of your notebook" in learner_page
    assert "**Grader note:**" in learner_page  # as typed, not bold
    assert_shown_as_text(learner_page)

    as_instructor(client)
    instructor_page = client.get(submission).text
    assert "Instructor" in instructor_page and "**Grader note:**" in instructor_page
    assert_shown_as_text(instructor_page)


def test_an_exception_message_with_markup_is_text_in_every_panel(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id = learner_and_instructor(client, sessions)
    code = f"def train_step(model, optimizer, loss_fn, x, y):\n    raise RuntimeError({MARKUP!r})\n"
    submission = submit(client, course_id, code)
    deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
    while 'data-finished="true"' not in (result := client.get(f"{submission}/result")).text:
        assert time.monotonic() < deadline, "still not graded"
        time.sleep(0.2)
    assert "runtime-error" in result.text, result.text
    feedback = re.search(r'<div class="feedback">(.*?)</div>', result.text, re.S)
    assert feedback is not None and "RuntimeError" in feedback[1]
    for page in (result.text, client.get(submission).text):
        assert_shown_as_text(page)

    as_instructor(client)
    instructor_page = client.get(submission).text
    assert "RuntimeError" in instructor_page
    assert_shown_as_text(instructor_page)


def test_feedback_renders_no_link_image_heading_or_table_whatever_it_holds() -> None:
    render = templates.env.filters["feedback"]
    html = str(
        render(
            f"Your loop: **zero, backward, step**, `step()`.\n\n[x]({EVIL}) ![i]({EVIL}) "
            f"<{EVIL}>\n\n# Grader note\n\n> quoted\n\n| a |\n|---|\n| b |\n\n[ref]: {EVIL}\n"
        )
    )
    assert "<strong>zero, backward, step</strong>" in html and "<code>step()</code>" in html
    for tag in ("<a", "<img", "<h1", "<blockquote", "<table"):
        assert tag not in html, html
    assert f"[x]({EVIL})" in html
