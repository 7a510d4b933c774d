"""Hints on a result: opened one level at a time by the learner whose result it is, each next
level after N more attempts with that diagnosis when the course says so, the corrected lines
withheld when it says so, every opening recorded and counted on the statistics, the first hint
and the count in the REST answer, and the course's settings refused with a sentence when wrong."""

from __future__ import annotations

import time

import httpx
from sqlalchemy import select

from app.api_keys import create_api_key
from app.db import SessionFactory
from app.models import AuditEvent, HintOpen
from graders.hints import hints_for
from tests.app.conftest import EXERCISE, GRADING_TIMEOUT_SECONDS, MISSING_ZERO_GRAD_CODE
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.app.test_course_settings import form_of, post
from tests.app.test_personal_tokens import bearer, new_token
from tests.servers import HTTP_TIMEOUT_SECONDS

HINTS = hints_for(EXERCISE, "missing-zero-grad")


def _client(client: httpx.Client, email: str) -> httpx.Client:
    other = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(other, email)
    return other


def _set_hints(teacher: httpx.Client, course_id: str, **hint_fields: str) -> httpx.Response:
    path = f"/courses/{course_id}/settings"
    fields = {"hint_unlock_attempts": "0", "lesson_url": "", **hint_fields}
    return post(teacher, path, form_of(token_of(teacher.get(path)), None, **fields))


def _open(learner: httpx.Client, submission: str, level: int) -> httpx.Response:
    token = token_of(learner.get(submission))
    return learner.post(f"{submission}/hints", data={"level": str(level), "csrf_token": token})


def _submit_and_wait(learner: httpx.Client, course_id: str) -> str:
    """Submit the loop that never clears through the exercise page; wait for its grade."""
    page = f"/courses/{course_id}/exercises/{EXERCISE}"
    posted = learner.post(
        page, data={"code": MISSING_ZERO_GRAD_CODE, "csrf_token": token_of(learner.get(page))}
    )
    assert posted.status_code == 303, posted.text
    submission = posted.headers["location"].split("?")[0]
    deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
    while 'data-finished="true"' not in learner.get(f"{submission}/result").text:
        assert time.monotonic() < deadline, "still not graded"
        time.sleep(0.2)
    return submission


def test_three_attempts_unlock_the_three_hints_in_order(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    assert HINTS is not None
    make_user(sessions, "tess@example.org")
    make_user(sessions, "ann@example.org", name="Ann")
    make_user(sessions, "ben@example.org", name="Ben")
    course_id = make_course(sessions, "tess@example.org", "ann@example.org", "ben@example.org")
    teacher = _client(client, "tess@example.org")
    assert _set_hints(teacher, course_id, hint_unlock_attempts="1").status_code == 303
    ann = _client(client, "ann@example.org")

    first = _submit_and_wait(ann, course_id)
    page = ann.get(first).text
    assert "Show a hint (1 of 3)" in page and 'id="hint-1"' not in page
    lesson = f'href="/courses/{course_id}/exercises/{EXERCISE}#lesson-three-lines"'
    assert lesson in page
    assert 'id="lesson-three-lines"' in ann.get(f"/courses/{course_id}/exercises/{EXERCISE}").text
    opened = _open(ann, first, 1)
    assert opened.status_code == 303 and opened.headers["location"].endswith("#hint-1")
    page = ann.get(first).text
    assert 'id="hint-1"' in page and "Look at the first of the three lines" in page
    assert "Show a hint (2 of 3)" in page and "Opens after 1 more attempt with" in page
    early = _open(ann, first, 2)
    assert early.status_code == 422
    assert "Not opened: the next hint opens after 1 more attempt" in early.text
    assert _open(ann, first, 3).status_code == 422  # never out of order

    second = _submit_and_wait(ann, course_id)
    page = ann.get(second).text
    assert 'id="hint-1"' in page  # opened once, open on every result with the diagnosis
    assert "Opens after" not in page
    assert _open(ann, second, 2).status_code == 303
    assert "Opens after 1 more attempt" in ann.get(second).text  # level 3 waits again

    third = _submit_and_wait(ann, course_id)
    assert _open(ann, third, 3).status_code == 303
    page = ann.get(third).text
    assert page.count('id="hint-') == 3 and "That is every hint this course shows" in page
    assert "optimizer.zero_grad()" in page.split('id="hint-3"')[1]
    assert _open(ann, third, 3).status_code == 303  # sent twice: opened once

    with sessions() as session:
        rows = session.execute(
            select(HintOpen.submission_id, HintOpen.diagnosis, HintOpen.level).order_by(
                HintOpen.level
            )
        ).all()
    ids = [url.rsplit("/", 1)[1] for url in (first, second, third)]
    assert [tuple(row) for row in rows] == [
        (ids[0], "missing-zero-grad", 1),
        (ids[1], "missing-zero-grad", 2),
        (ids[2], "missing-zero-grad", 3),
    ]
    stats = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/stats").text
    row = stats.split("Hints opened per diagnosis and level")[1].split("</tr>", 2)[1]
    assert "Gradients not cleared before backward" in row and row.count(">1</td>") == 3

    # Nobody else opens Ann's hints, nor sees them.
    ben = _client(client, "ben@example.org")
    assert ben.post(f"{first}/hints", data={"level": "1", "csrf_token": "x"}).status_code in (
        403,
        404,
    )
    assert "Show a hint" not in teacher.get(first).text


def test_the_course_withholds_the_fix_and_links_its_own_lesson(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org")
    ann_id = make_user(sessions, "ann@example.org")
    course_id = make_course(sessions, "tess@example.org", "ann@example.org")
    teacher = _client(client, "tess@example.org")

    bad = _set_hints(teacher, course_id, lesson_url="javascript:alert(1)")
    assert bad.status_code == 422
    assert "Nothing was saved. Hints: The lesson link must be a whole http://" in bad.text
    assert 'value="javascript:alert(1)"' in bad.text  # the form comes back as it was sent
    assert _set_hints(teacher, course_id, hint_unlock_attempts="many").status_code == 422
    assert _set_hints(teacher, course_id, hint_unlock_attempts="-1").status_code == 422

    url = "https://lessons.example.org/week-2"
    saved = _set_hints(teacher, course_id, lesson_url=url, hints_hide_fix="1")
    assert saved.status_code == 303 and "done=saved" in saved.headers["location"]
    with sessions() as session:
        audited = session.scalars(
            select(AuditEvent).where(AuditEvent.action == "course.hints-set")
        ).all()
    assert len(audited) == 1 and audited[0].details["lesson_url"] == url
    settings = teacher.get(f"/courses/{course_id}/settings").text
    assert f'value="{url}"' in settings and 'name="hints_hide_fix" value="1" checked' in settings

    submission = f"/submissions/{graded(sessions, user_id=ann_id, course_id=course_id, score=3)}"
    ann = _client(client, "ann@example.org")
    page = ann.get(submission).text
    assert f'href="{url}#missing-zero-grad"' in page and "Show a hint (1 of 2)" in page
    assert _open(ann, submission, 1).status_code == 303
    assert _open(ann, submission, 2).status_code == 303
    page = ann.get(submission).text
    assert "That is every hint this course shows" in page and "(3 of" not in page
    refused = _open(ann, submission, 3)
    assert refused.status_code == 422
    assert "this course does not show the corrected lines" in refused.text

    correct = graded(sessions, user_id=ann_id, course_id=course_id, score=10)
    with sessions.begin() as session:
        _, secret = create_api_key(session, name="lms", course_id=course_id)
    key = {"Authorization": f"Bearer {secret}"}
    for submission_id, count, first in (
        (submission.rsplit("/", 1)[1], 2, HINTS.levels[0]),  # type: ignore[union-attr]
        (correct, 0, None),
    ):
        body = client.get(f"/api/v1/submissions/{submission_id}", headers=key).json()
        assert (body["hint_count"], body["first_hint"]) == (count, first)
        assert HINTS.levels[1] not in str(body)  # type: ignore[union-attr]
    listed = client.get("/api/v1/submissions", headers=key).json()
    assert sorted(answer["hint_count"] for answer in listed) == [0, 2]
    # The learner's own API answers the same.
    mine = client.get(f"/api/v1/me{submission}", headers=bearer(new_token(ann))).json()
    assert (mine["hint_count"], mine["first_hint"]) == (2, HINTS.levels[0])  # type: ignore[union-attr]


def test_practice_never_opens_what_the_learners_course_withholds(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    """The same code as practice: the course's rules follow Ann there (two levels, the second
    after one more attempt); Ben, in no course, has practice's own (all three, one at a time)."""
    assert HINTS is not None
    make_user(sessions, "tess@example.org")
    ann_id = make_user(sessions, "ann@example.org")
    ben_id = make_user(sessions, "ben@example.org")
    course_id = make_course(sessions, "tess@example.org", "ann@example.org")
    teacher = _client(client, "tess@example.org")
    saved = _set_hints(teacher, course_id, hint_unlock_attempts="1", hints_hide_fix="1")
    assert saved.status_code == 303

    ann = _client(client, "ann@example.org")
    first = f"/submissions/{graded(sessions, user_id=ann_id, course_id=None, score=3)}"
    page = ann.get(first).text
    assert "Show a hint (1 of 2)" in page
    assert _open(ann, first, 1).status_code == 303
    early = _open(ann, first, 2)
    assert early.status_code == 422 and "opens after 1 more attempt" in early.text
    second = f"/submissions/{graded(sessions, user_id=ann_id, course_id=None, score=3)}"
    assert _open(ann, second, 2).status_code == 303
    refused = _open(ann, second, 3)
    assert refused.status_code == 422
    assert "your course does not show the corrected lines for this exercise" in refused.text
    page = ann.get(second).text
    assert "That is every hint your course shows" in page and 'id="hint-3"' not in page
    mine = client.get(f"/api/v1/me{second}", headers=bearer(new_token(ann))).json()
    assert mine["hint_count"] == 2 and HINTS.levels[2] not in str(mine)

    # The course no longer withholds it: practice opens the fix too.
    assert _set_hints(teacher, course_id, hint_unlock_attempts="1").status_code == 303
    third = f"/submissions/{graded(sessions, user_id=ann_id, course_id=None, score=3)}"
    assert _open(ann, third, 3).status_code == 303
    assert "optimizer.zero_grad()" in ann.get(third).text.split('id="hint-3"')[1]

    ben = _client(client, "ben@example.org")
    his = f"/submissions/{graded(sessions, user_id=ben_id, course_id=None, score=3)}"
    assert "Show a hint (1 of 3)" in ben.get(his).text
    for level in (1, 2, 3):
        assert _open(ben, his, level).status_code == 303
