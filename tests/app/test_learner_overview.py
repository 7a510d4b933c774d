"""The course home's overview (progress, due dates with a countdown, how scores count), the
practice strip after solving in a course, and a learner's code as downloads (access checked)."""

from __future__ import annotations

import io
import re
import zipfile
from datetime import timedelta

import httpx
from sqlalchemy import update

from app.db import SessionFactory
from app.models import Assignment, SiteRole, utc_now
from app.rendering import countdown_words
from graders.exercises import list_exercises
from tests.app.conftest import EXERCISE
from tests.app.people import graded, make_course, make_user, sign_in
from tests.servers import HTTP_TIMEOUT_SECONDS


def _signed_in(client: httpx.Client, email: str) -> httpx.Client:
    browser = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(browser, email).status_code == 303
    return browser


def test_countdown_words() -> None:
    assert countdown_words(3 * 86400 + 4 * 3600 + 59) == "in 3 days, 4 hours"
    assert countdown_words(86400) == "in 1 day"
    assert countdown_words(2 * 3600 + 60) == "in 2 hours, 1 minute"
    assert countdown_words(10) == "in 1 minute"
    assert countdown_words(-(5 * 60)) == "5 minutes ago"


def test_course_home_says_progress_due_dates_and_how_scores_count(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    lee = make_user(sessions, "lee@example.org")
    course_id = make_course(sessions, "tess@example.org", "lee@example.org")
    due = utc_now() + timedelta(days=2, hours=3, minutes=30)
    with sessions.begin() as session:
        session.execute(
            update(Assignment)
            .where(Assignment.course_id == course_id, Assignment.exercise_id == EXERCISE)
            .values(due_at=due, late_penalty_percent_per_day=10.0)
        )
    graded(sessions, user_id=lee, course_id=course_id, score=4.0)
    graded(sessions, user_id=lee, course_id=course_id, score=10.0, exercise="prove-accumulation")
    learner = _signed_in(client, "lee@example.org")

    home = learner.get(f"/courses/{course_id}").text
    summary = re.sub(r"\s+", " ", home)
    count = len(list_exercises())
    most = sum(e.max_score for e in list_exercises())
    assert f"<strong>2 of {count} solved</strong>" not in summary  # train-step is only tried
    assert f"<strong>1 of {count} solved</strong>, 14/{most:g} points" in summary
    # The due date as an absolute UTC time (localised by time.js), and a countdown that reads
    # without JavaScript.
    assert f'<time datetime="{due.isoformat()}" data-local>' in home
    assert re.search(r"data-countdown>in 2 days, 3 hours</time>", home)
    assert "Next due:" in home
    assert "Your best submission counts: submitting again never lowers your score." in home
    assert "loses 10% of its score for each started day after the due date" in home
    # Solved in the course: the practice strip says so too.
    practice = learner.get("/").text
    solved = re.findall(
        r'href="/exercises/([a-z-]+)">[^<]*</a>\s*<span class="tag practice-tag">Practice:</span>'
        r'\s*<span class="state state-(\w+)',
        practice,
    )
    assert dict(solved)["prove-accumulation"] == "solved"
    assert dict(solved)[EXERCISE] == "tried"


def test_a_learner_downloads_their_code_and_no_one_elses(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    lee = make_user(sessions, "lee@example.org")
    make_user(sessions, "max@example.org")
    course_id = make_course(sessions, "tess@example.org", "lee@example.org", "max@example.org")
    first = graded(sessions, user_id=lee, course_id=course_id, score=4.0, code="print('one')\n")
    graded(
        sessions,
        user_id=lee,
        course_id=course_id,
        score=10.0,
        exercise="prove-accumulation",
        code="print('two')\n",
    )
    practice = graded(sessions, user_id=lee, course_id=None, score=1.0, code="print('p')\n")
    learner = _signed_in(client, "lee@example.org")

    one = learner.get(f"/submissions/{first}/code.py")
    assert one.status_code == 200 and one.text == "print('one')\n"
    assert one.headers["content-type"].startswith("text/x-python")
    disposition = one.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="train-step-') and disposition.endswith(
        '.py"'
    )
    archive = learner.get(f"/courses/{course_id}/my-code.zip")
    assert archive.status_code == 200 and archive.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(archive.content)) as files:
        names = files.namelist()
        assert sorted(name.split("/")[0] for name in names) == ["prove-accumulation", EXERCISE]
        assert sorted(files.read(name) for name in names) == [b"print('one')\n", b"print('two')\n"]
    assert practice not in " ".join(names)

    # Another learner of the course: not their submission, and their own zip is empty.
    other = _signed_in(client, "max@example.org")
    assert other.get(f"/submissions/{first}/code.py").status_code == 404
    with zipfile.ZipFile(io.BytesIO(other.get(f"/courses/{course_id}/my-code.zip").content)) as z:
        assert z.namelist() == []
    # The instructor may read it; a stranger to the course may not have the course's zip.
    teacher = _signed_in(client, "tess@example.org")
    assert teacher.get(f"/submissions/{first}/code.py").text == "print('one')\n"
    make_user(sessions, "sam@example.org")
    stranger = _signed_in(client, "sam@example.org")
    assert stranger.get(f"/courses/{course_id}/my-code.zip").status_code == 404
    assert stranger.get(f"/submissions/{first}/code.py").status_code == 404
    # Not signed in: sent to sign in.
    anonymous = client.get(f"/courses/{course_id}/my-code.zip")
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/sign-in")
