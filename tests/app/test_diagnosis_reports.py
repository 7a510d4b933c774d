"""A learner's "this diagnosis looks wrong": sent from their submission's page, seen by the
course's instructors with the submission, counted per diagnosis on the statistics, and refused
with a sentence to anyone else, for practice, before grading, or when too long."""

from __future__ import annotations

import re

import httpx
from sqlalchemy import func, select

from app.db import SessionFactory
from app.models import DiagnosisReport, Submission, SubmissionStatus
from tests.app.conftest import EXERCISE
from tests.app.people import graded, make_course, make_user, post_form, sign_in
from tests.servers import HTTP_TIMEOUT_SECONDS


def _client(client: httpx.Client, email: str) -> httpx.Client:
    other = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(other, email)
    return other


def _reports(sessions: SessionFactory) -> list[tuple[str, str, str]]:
    with sessions() as session:
        rows = session.execute(
            select(DiagnosisReport.submission_id, DiagnosisReport.diagnosis, DiagnosisReport.note)
        )
        return [(submission, code, note) for submission, code, note in rows]


def test_a_report_reaches_the_instructors_and_is_counted(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "teacher@example.org")
    ann_id = make_user(sessions, "ann@example.org", name="Ann")
    make_user(sessions, "ben@example.org", name="Ben")
    course_id = make_course(sessions, "teacher@example.org", "ann@example.org", "ben@example.org")
    wrong = graded(sessions, user_id=ann_id, course_id=course_id, score=3)  # missing-zero-grad
    other = graded(sessions, user_id=ann_id, course_id=course_id, score=3)
    ann = _client(client, "ann@example.org")
    page = ann.get(f"/submissions/{wrong}")
    assert "Does this diagnosis look wrong?" in page.text

    sent = post_form(
        ann,
        f"/submissions/{wrong}",
        f"/submissions/{wrong}/diagnosis-report",
        {"note": "I do call zero_grad() on line 2 <b>really</b>"},
    )
    assert sent.status_code == 303 and sent.headers["location"].endswith("?done=reported")
    page = ann.get(sent.headers["location"])
    assert "Sent: your instructors see your note" in page.text
    assert "You told your instructors" in page.text
    assert "&lt;b&gt;really&lt;/b&gt;" in page.text  # the note is text, never markup
    again = post_form(
        ann, f"/submissions/{wrong}", f"/submissions/{wrong}/diagnosis-report", {"note": ""}
    )
    assert again.status_code == 303
    assert _reports(sessions) == [(wrong, "missing-zero-grad", "")]  # one, the note replaced

    teacher = _client(client, "teacher@example.org")
    review = teacher.get(f"/submissions/{wrong}").text
    assert "Learner's report" in review and "the diagnosis looks wrong" in review
    assert "Learner's report" not in teacher.get(f"/submissions/{other}").text
    stats = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/stats").text
    listed = (
        f"/courses/{course_id}/submissions?exercise={EXERCISE}"
        "&amp;diagnosis=missing-zero-grad&amp;reported=1"
    )
    assert f'<a href="{listed}">1</a>' in stats
    only_reported = teacher.get(listed.replace("&amp;", "&")).text
    assert only_reported.count('data-label="When"') == 1
    assert f"/submissions/{wrong}?" in only_reported and "reported wrong" in only_reported
    everything = teacher.get(f"/courses/{course_id}/submissions").text
    assert everything.count('data-label="When"') == 2

    # Anyone else's report is refused: another learner cannot even see it; the instructor is
    # told only its learner can.
    ben = _client(client, "ben@example.org")
    token = re.search(r'name="csrf_token" value="([^"]+)"', ben.get("/").text)
    assert token is not None
    refused = ben.post(
        f"/submissions/{wrong}/diagnosis-report", data={"note": "x", "csrf_token": token[1]}
    )
    assert refused.status_code == 404
    by_teacher = post_form(
        teacher, f"/submissions/{wrong}", f"/submissions/{wrong}/diagnosis-report", {"note": "x"}
    )
    assert by_teacher.status_code == 422
    assert "only the learner who submitted this code" in by_teacher.text
    assert _reports(sessions) == [(wrong, "missing-zero-grad", "")]


def test_reports_refused_for_practice_before_grading_and_when_too_long(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "teacher@example.org")
    ann_id = make_user(sessions, "ann@example.org", name="Ann")
    course_id = make_course(sessions, "teacher@example.org", "ann@example.org")
    practice = graded(sessions, user_id=ann_id, course_id=None, score=3)
    grading = graded(sessions, user_id=ann_id, course_id=course_id, score=3)
    with sessions.begin() as session:
        row = session.get(Submission, grading)
        assert row is not None
        row.status, row.score, row.diagnosis = SubmissionStatus.RUNNING, None, None
    course_submission = graded(sessions, user_id=ann_id, course_id=course_id, score=3)
    ann = _client(client, "ann@example.org")
    assert "Does this diagnosis look wrong?" not in ann.get(f"/submissions/{practice}").text

    for submission_id, note, words in (
        (practice, "", "practice has no instructor to tell"),
        (grading, "", "wait until it is graded"),
        (course_submission, "x" * 1001, "at most 1000 characters"),
    ):
        answer = post_form(
            ann,
            f"/submissions/{course_submission}",
            f"/submissions/{submission_id}/diagnosis-report",
            {"note": note},
        )
        assert answer.status_code == 422, (submission_id, answer.status_code)
        assert 'role="alert"' in answer.text and words in answer.text
    no_token = ann.post(f"/submissions/{course_submission}/diagnosis-report", data={"note": ""})
    assert 400 <= no_token.status_code < 500
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(DiagnosisReport)) == 0
