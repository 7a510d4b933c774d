"""One transaction owner: the request (or the worker's block) commits once or rolls back, and
what follows a commit (grading) runs only after it. On a real SQLite."""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import SessionDep, SessionFactory, create_db_engine, create_session_factory
from app.errors import AppError
from app.grading.drafts import save_draft
from app.grading.jobs import requeue_waiting
from app.grading.queue import enqueue_after_commit
from app.grading.submissions import create_submission
from app.main import create_app
from app.models import Submission, User
from app.people.accounts import create_user
from app.settings import Settings
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.app.people import PASSWORD, make_user, sign_in
from tests.servers import HTTP_TIMEOUT_SECONDS, app_in_thread

APP = Path(__file__).resolve().parents[2] / "app"


class RecordingDispatcher:
    """The Dispatcher protocol, keeping what it was handed (the tests grade nothing)."""

    def __init__(self) -> None:
        self.enqueued: list[str] = []

    def start(self) -> None: ...

    def enqueue(self, submission_id: str) -> None:
        self.enqueued.append(submission_id)

    def stop(self) -> None: ...

    def readiness_problem(self) -> str | None:
        return None  # it takes every id it is handed


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
    )


def test_a_submission_reaches_a_worker_only_after_its_commit(
    sessions: SessionFactory, dispatcher: RecordingDispatcher
) -> None:
    with sessions.begin() as session:
        submission_id = _submit(session).id
        assert dispatcher.enqueued == []  # not committed: no worker may look yet
    assert dispatcher.enqueued == [submission_id]


def test_a_submission_holds_no_write_lock_until_its_commit(
    settings: Settings, sessions: SessionFactory
) -> None:
    """SQLite has one writer at a time. A request's submission goes in with its commit, so the
    request does not hold the write lock while its answer is made: another writer (a grading
    storing its result, another request) is not kept waiting meanwhile. Held there, a burst of
    submissions kept the gradings waiting for seconds
    (docs/performance.md#a-submissions-insert-goes-in-with-the-commit)."""
    if not settings.database_url.startswith("sqlite"):
        pytest.skip("row locks: a PostgreSQL writer of another row never waits for this one")
    impatient = create_db_engine(settings.database_url, busy_timeout_seconds=0)
    with sessions.begin() as session:
        first = _submit(session).id
        # Fails at once ("database is locked") if the first transaction holds the lock.
        with create_session_factory(impatient).begin() as other:
            second = _submit(other).id
    impatient.dispose()
    with sessions.begin() as session:
        stored = set(session.scalars(select(Submission.id)))
    assert stored == {first, second}


def test_a_rolled_back_submission_never_reaches_a_worker(
    sessions: SessionFactory, dispatcher: RecordingDispatcher
) -> None:
    with pytest.raises(RuntimeError), sessions.begin() as session:
        _submit(session)
        raise RuntimeError("the request failed after the submission was made")
    with sessions.begin() as session:
        kept = _submit(session).id
        assert session.scalars(select(Submission.id)).all() == [kept]
    assert dispatcher.enqueued == [kept]


def test_a_savepoint_inside_the_transaction_is_not_its_commit(
    sessions: SessionFactory, dispatcher: RecordingDispatcher
) -> None:
    """The first draft's insert runs in a savepoint, which SQLAlchemy reports released as a
    commit: a worker handed the submission then would find no row on PostgreSQL. A savepoint
    rolled back leaves the transaction's submission to go out with its commit."""
    user_id = make_user(sessions, "drafter@example.edu")
    with sessions.begin() as session:
        submission_id = _submit(session).id
        save_draft(
            session,
            user_id=user_id,
            course_id=None,
            exercise_id=EXERCISE,
            code=CORRECT_CODE,
            max_code_bytes=65536,
        )
        assert dispatcher.enqueued == []
        with contextlib.suppress(RuntimeError), session.begin_nested():
            raise RuntimeError("a conflict inside a savepoint, as two tabs saving at once")
        assert dispatcher.enqueued == []
    assert dispatcher.enqueued == [submission_id]


def test_requeued_submissions_are_handed_over_by_the_same_hook(
    sessions: SessionFactory, dispatcher: RecordingDispatcher
) -> None:
    with sessions.begin() as session:
        first = _submit(session).id
    with sessions.begin() as session:
        assert requeue_waiting(session, queued_before=None) == [first]
    assert dispatcher.enqueued == [first, first]


@pytest.mark.parametrize(
    ("outcome", "status", "kept"),
    [("ok", 200, True), ("refused", 409, False), ("crashed", 500, False)],
)
def test_the_request_commits_on_success_and_rolls_back_on_an_error(
    settings: Settings, sessions: SessionFactory, outcome: str, status: int, kept: bool
) -> None:
    app = create_app(settings)

    class Refused(AppError):
        status_code = 409

    # A route as any other: it writes (flushes), then answers, refuses or fails.
    @app.post("/tests/write")
    def write(session: SessionDep) -> dict[str, str]:
        create_user(session, email="ada@example.org", name="Ada", password=PASSWORD)
        if outcome == "refused":
            raise Refused("refused after writing")
        if outcome == "crashed":
            raise RuntimeError("a bug after writing")
        return {"written": "yes"}

    with (
        app_in_thread(app) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        response = client.post("/tests/write")
    assert response.status_code == status, response.text
    with sessions() as session:
        emails = session.scalars(select(User.email)).all()
    assert emails == (["ada@example.org"] if kept else [])


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


def test_the_database_pool_serves_every_request_thread_at_once(settings: Settings) -> None:
    # FastAPI runs sync routes on anyio's 40 worker threads; each holds a connection for its
    # request, beside the grading workers and the outbox. SQLAlchemy's default pool (5 + 10)
    # made the 16th wait 30 s and answer 500 while pages polled.
    engine = create_db_engine(settings.database_url)
    try:
        with contextlib.ExitStack() as held:
            connections = [held.enter_context(engine.connect()) for _ in range(45)]
            assert all(c.exec_driver_sql("SELECT 1").scalar() == 1 for c in connections)
    finally:
        engine.dispose()
