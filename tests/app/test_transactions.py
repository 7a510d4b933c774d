"""One transaction owner: the request (or the worker's block) commits once or rolls back, and
what follows a commit (grading) runs only after it. On a real SQLite."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import SessionFactory
from app.grading.queue import enqueue_after_commit
from app.grading.submissions import create_submission, requeue_waiting
from app.models import Submission, User
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.app.people import make_user, sign_in, token_of

APP = Path(__file__).resolve().parents[2] / "app"


class RecordingDispatcher:
    """The Dispatcher protocol, keeping what it was handed (the tests grade nothing)."""

    def __init__(self) -> None:
        self.enqueued: list[str] = []

    def start(self) -> None: ...

    def enqueue(self, submission_id: str) -> None:
        self.enqueued.append(submission_id)

    def stop(self) -> None: ...


@pytest.fixture
def dispatcher(sessions: SessionFactory) -> RecordingDispatcher:
    dispatcher = RecordingDispatcher()
    enqueue_after_commit(sessions, dispatcher)
    return dispatcher


def _submit(session: Session) -> Submission:
    return create_submission(
        session,
        exercise_id=EXERCISE,
        learner="alice",
        code=CORRECT_CODE,
        max_code_bytes=65536,
    )


def test_a_submission_reaches_a_worker_only_after_its_commit(
    sessions: SessionFactory, dispatcher: RecordingDispatcher
) -> None:
    with sessions.begin() as session:
        submission_id = _submit(session).id
        assert dispatcher.enqueued == []  # flushed, not committed: no worker may look yet
    assert dispatcher.enqueued == [submission_id]


def test_a_rolled_back_submission_never_reaches_a_worker(
    sessions: SessionFactory, dispatcher: RecordingDispatcher
) -> None:
    with pytest.raises(RuntimeError), sessions.begin() as session:
        _submit(session)
        raise RuntimeError("the request failed after the submission was flushed")
    with sessions.begin() as session:
        kept = _submit(session).id
        assert session.scalars(select(Submission.id)).all() == [kept]
    assert dispatcher.enqueued == [kept]


def test_requeued_submissions_are_handed_over_by_the_same_hook(
    sessions: SessionFactory, dispatcher: RecordingDispatcher
) -> None:
    with sessions.begin() as session:
        first = _submit(session).id
    with sessions.begin() as session:
        assert requeue_waiting(session, queued_before=None) == [first]
    assert dispatcher.enqueued == [first, first]


def test_an_error_answer_rolls_back_what_the_request_wrote(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    # Sign-up writes the user, then the join code is wrong: the 422 leaves no account behind.
    token = token_of(client.get("/sign-up"))
    response = client.post(
        "/sign-up",
        data={
            "csrf_token": token,
            "email": "ada@example.org",
            "name": "Ada",
            "password": "a long enough password",
            "join_code": "NOSUCHCODE",
        },
    )
    assert response.status_code == 422, response.text
    with sessions() as session:
        assert session.scalars(select(User)).all() == []


def test_a_refusal_kept_on_purpose_is_committed_with_its_error_answer(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.edu")
    statuses = [sign_in(client, "tess@example.edu", "wrong password").status_code for _ in range(6)]
    # Five 401s were each committed (they count), so the sixth meets the limit.
    assert statuses == [401] * 5 + [429]


def test_no_route_commits_or_rolls_back_by_hand() -> None:
    surfaces = [*APP.glob("web/*.py"), *APP.glob("api/*.py")]
    assert surfaces
    for path in surfaces:
        text = path.read_text()
        assert ".commit()" not in text and ".rollback()" not in text, path
        assert ".enqueue(" not in text, path
