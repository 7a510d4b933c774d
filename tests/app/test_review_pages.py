"""Going through a course's submissions: the diagnosis filter lists the codes by name with
their counts, and each submission's page links the previous and next one of the filtered list."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import httpx

from app.audit import SENTENCES, AuditAction
from app.db import SessionFactory
from app.models import SiteRole, Submission, utc_now
from tests.app.conftest import EXERCISE
from tests.app.people import graded, make_course, make_user, sign_in
from tests.servers import HTTP_TIMEOUT_SECONDS


def test_diagnosis_list_and_next_submission_keep_the_filter(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    lee = make_user(sessions, "lee@example.org")
    course_id = make_course(sessions, "tess@example.org", "lee@example.org")
    start = utc_now() - timedelta(hours=1)
    ids = [
        graded(
            sessions,
            user_id=lee,
            course_id=course_id,
            score=score,
            diagnosis=diagnosis,
            created_at=start + timedelta(minutes=minute),
        )
        for minute, (score, diagnosis) in enumerate(
            [(4, "missing-zero-grad"), (10, "correct"), (4, "missing-zero-grad"), (2, None)]
        )
    ]
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "tess@example.org")
    page = teacher.get(f"/courses/{course_id}/submissions?exercise={EXERCISE}").text
    assert '<input id="diagnosis"' not in page
    options = re.findall(r'<option value="([a-z-]+)" >([^<]+)</option>', page)
    assert ("missing-zero-grad", "Gradients not cleared before backward (3)") in options
    assert ("correct", "Correct (1)") in options

    listed = teacher.get(
        f"/courses/{course_id}/submissions?exercise={EXERCISE}&diagnosis=missing-zero-grad"
    ).text
    links = re.findall(r'href="/submissions/([0-9a-f-]+)\?list=([^"]+)"', listed)
    # Newest first: the two (of four) with that diagnosis (the helper's None is missing-zero-grad).
    assert [sid for sid, _ in links] == [ids[3], ids[2], ids[0]]
    first = teacher.get(f"/submissions/{links[0][0]}?list={links[0][1]}").text
    assert "Submission 1 of 3" in first and 'rel="prev"' not in first
    following = re.search(r'href="/submissions/([0-9a-f-]+)\?list=([^"]+)" rel="next"', first)
    assert following and following[1] == ids[2]
    middle = teacher.get(f"/submissions/{following[1]}?list={following[2]}").text
    assert "Submission 2 of 3" in middle and f"/submissions/{ids[3]}?list=" in middle
    assert "diagnosis%3Dmissing-zero-grad" in middle
    # Without the list (or for its learner) there is no such navigation.
    assert "review-nav" not in teacher.get(f"/submissions/{ids[0]}").text
    learner = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(learner, "lee@example.org")
    assert "Next submission" not in learner.get(f"/submissions/{ids[2]}?list={links[0][1]}").text


def test_the_audit_log_reads_as_sentences_naming_the_learner(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR, name="Tess")
    alice = make_user(sessions, "alice@example.org", name="Alice")
    course_id = make_course(sessions, "tess@example.org", "alice@example.org")
    submission_id = graded(sessions, user_id=alice, course_id=course_id, score=4.0)
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "tess@example.org")
    token = re.search(r'name="csrf_token" value="([^"]+)"', teacher.get("/").text)
    assert token
    set_it = teacher.post(
        f"/submissions/{submission_id}/override",
        data={
            "csrf_token": token[1],
            "score": "7",
            "reason": "explained it in the lab",
            "confirmed": "yes",
        },
    )
    assert set_it.status_code == 303
    # Removing it first says what it does to the counted score, and removes nothing yet.
    asked = teacher.post(
        f"/submissions/{submission_id}/override/remove", data={"csrf_token": token[1]}
    )
    assert asked.status_code == 200
    assert "This changes the counted score from 7 to 4." in asked.text
    assert 'name="confirmed" value="yes"' in asked.text
    with sessions() as session:
        assert session.get_one(Submission, submission_id).override_score == 7
    removed = teacher.post(
        f"/submissions/{submission_id}/override/remove",
        data={"csrf_token": token[1], "confirmed": "yes"},
    )
    assert removed.status_code == 303
    # Nothing left to remove: said on the page, not a 500.
    again = teacher.post(
        f"/submissions/{submission_id}/override/remove", data={"csrf_token": token[1]}
    )
    assert again.status_code == 422 and "no override to remove" in again.text
    log = html.unescape(" ".join(teacher.get(f"/courses/{course_id}/audit").text.split()))
    assert (
        "Tess overrode Alice's One training step: zero, backward, step score 4 → 7: "
        "“explained it in the lab”; counted score 4 → 7." in log
    )
    assert (
        "Tess removed the override of Alice's One training step: zero, backward, step score "
        "(7; the graded 4 counts again); counted score 7 → 4." in log
    )
    assert log.index("removed the override") < log.index("overrode")  # newest first
    page = html.unescape(teacher.get(f"/submissions/{submission_id}").text)
    assert "Tess overrode Alice's" in page


def test_every_audit_action_has_its_sentence() -> None:
    assert set(SENTENCES) == set(AuditAction)
