"""Faults on the real services: a worker killed, PostgreSQL away, a crowd, a client's retries.

(Redis restarted: test_redis_restart.py.)

Every submission a client was told is accepted ends graded, and graded exactly once: one
claim stores its result (`attempts` counts the claims), whatever died on the way.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from app.api_keys import create_api_key
from app.db import SessionFactory, create_db_engine, create_session_factory, upgrade_database
from app.main import create_app
from app.models import Submission
from app.settings import Settings
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.hosts.conftest import Worker
from tests.servers import app_in_thread
from tests.services import create_database, postgres_server

# Graded on a small, shared machine: a queue of many grades behind two workers takes a while.
GRADING_TIMEOUT_SECONDS = 300.0
# How long a client waits for any answer while PostgreSQL is away: a request must fail
# (503) well within it, not hang. Generous, for a busy machine; not a timing assertion.
OUTAGE_ANSWER_TIMEOUT_SECONDS = 30.0
# 200 by default; a smaller crowd (LOOPGRADE_TEST_CROWD_SIZE) for a quick run on a laptop.
CROWD_SIZE = int(os.environ.get("LOOPGRADE_TEST_CROWD_SIZE", "200"))
# A missing function is the cheapest real grade (one short sandbox run): for the crowd. (A
# syntax error is refused before any grading.)
MISSING_FUNCTION_CODE = "def other_step(model, optimizer, loss_fn, x, y):\n    return 0.0\n"


# Tries of one submission told 503 (admission control: the server is busy) before the test
# calls it refused for good.
BUSY_TRIES = 60


def submit(api: httpx.Client, auth: dict[str, str], learner: str, code: str = CORRECT_CODE) -> str:
    """POST as an API client should: told 503, again after Retry-After with the same
    Idempotency-Key (one submission, however many tries)."""
    idempotency_key = uuid.uuid4().hex
    for _ in range(BUSY_TRIES):
        response = api.post(
            "/api/v1/submissions",
            headers={**auth, "Idempotency-Key": idempotency_key},
            json={"exercise": EXERCISE, "learner": learner, "code": code},
        )
        if response.status_code != 503:
            break
        time.sleep(float(response.headers["retry-after"]))
    assert response.status_code == 202, response.text
    submission_id: str = response.json()["id"]
    return submission_id


def wait_for(
    condition: Callable[[], bool], what: str, timeout_seconds: float = GRADING_TIMEOUT_SECONDS
) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def rows(sessions: SessionFactory, ids: list[str]) -> dict[str, Submission]:
    with sessions() as session:
        found = session.scalars(select(Submission).where(Submission.id.in_(ids))).all()
        return {row.id: row for row in found}


def all_finished(sessions: SessionFactory, ids: list[str]) -> bool:
    return all(row.status in ("graded", "error") for row in rows(sessions, ids).values())


def status_of(sessions: SessionFactory, submission_id: str) -> str:
    return rows(sessions, [submission_id])[submission_id].status


# Correct, and holds its run for seconds while it loads, before the visible cases (the module
# is loaded once: the hidden part's budget never sees the sleep).
SLOW_CORRECT_CODE = "import time\ntime.sleep(3)\n" + CORRECT_CODE


def test_a_worker_killed_mid_grade_loses_nothing_and_grades_once(
    api: httpx.Client,
    auth: dict[str, str],
    sessions: SessionFactory,
    start_worker: Callable[..., Worker],
) -> None:
    doomed = start_worker()
    # Correct, but it holds its run for seconds: a warm worker otherwise grades it between two
    # looks at its status, and there is no "mid-grade" to kill it in.
    submission_id = submit(api, auth, "survivor", SLOW_CORRECT_CODE)
    wait_for(lambda: status_of(sessions, submission_id) == "running", "the first claim")
    doomed.kill()
    assert status_of(sessions, submission_id) == "running", "killed before it stored anything"

    survivor = start_worker()
    wait_for(lambda: all_finished(sessions, [submission_id]), "the grade after the kill")
    row = rows(sessions, [submission_id])[submission_id]
    assert (row.status, row.diagnosis, row.attempts) == ("graded", "correct", 2)
    assert row.max_score is not None, "a graded row has a maximum score"
    assert row.score == row.max_score > 0
    assert row.lease_expires_at is None
    assert survivor.log().count(f"submission {submission_id}: grading") == 1


def test_a_crowd_of_concurrent_submissions_over_2_workers_is_each_graded_once(
    api: httpx.Client,
    auth: dict[str, str],
    sessions: SessionFactory,
    start_worker: Callable[..., Worker],
) -> None:
    workers = [start_worker(LOOPGRADE_WORKER_COUNT="1") for _ in range(2)]
    with ThreadPoolExecutor(max_workers=32) as pool:
        ids = list(
            pool.map(
                lambda n: submit(api, auth, f"crowd-{n}", MISSING_FUNCTION_CODE), range(CROWD_SIZE)
            )
        )
    assert len(set(ids)) == CROWD_SIZE
    wait_for(lambda: all_finished(sessions, ids), "the crowd's grades", timeout_seconds=1800)

    graded = rows(sessions, ids)
    assert len(graded) == CROWD_SIZE
    assert {(row.status, row.diagnosis, row.attempts) for row in graded.values()} == {
        ("graded", "missing-function", 1)
    }
    logs = [worker.log() for worker in workers]
    for submission_id in ids:
        assert sum(log.count(f"submission {submission_id}: grading") for log in logs) == 1
    # Both workers took part (each has one grading thread: neither can hold the whole crowd).
    assert all("missing-function" in log for log in logs)
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Submission)) == CROWD_SIZE


def test_a_client_retry_with_the_same_idempotency_key_makes_one_submission(
    api: httpx.Client,
    auth: dict[str, str],
    sessions: SessionFactory,
    start_worker: Callable[..., Worker],
) -> None:
    start_worker()
    body = {"exercise": EXERCISE, "learner": "retrier", "code": MISSING_FUNCTION_CODE}
    headers = {**auth, "Idempotency-Key": "lms-attempt-7f3a"}

    def post(_: int) -> httpx.Response:
        return api.post("/api/v1/submissions", headers=headers, json=body)

    # The first answer lost on the way (as the client sees it), then retries, some at once.
    first = post(0)
    with ThreadPoolExecutor(max_workers=4) as pool:
        retries = list(pool.map(post, range(4)))
    assert {response.status_code for response in [first, *retries]} == {202}
    assert {response.json()["id"] for response in retries} == {first.json()["id"]}
    wait_for(lambda: all_finished(sessions, [first.json()["id"]]), "the one grade")
    with sessions() as session:
        stored = session.scalars(select(Submission).where(Submission.learner == "retrier")).all()
    assert [(row.status, row.attempts) for row in stored] == [("graded", 1)]


def test_postgresql_away_means_503_with_retry_after_then_recovery(
    redis_url: str, tmp_path: Path
) -> None:
    # A cluster of this test's own: stopping the session's would fail every other test.
    with postgres_server() as postgres:
        database_url = create_database(postgres.url, "loopgrade")
        upgrade_database(database_url)
        settings = Settings(
            data_dir=tmp_path / "data", database_url=database_url, broker_url=redis_url
        )
        engine = create_db_engine(database_url)
        with create_session_factory(engine).begin() as session:
            _, secret = create_api_key(session, name="outage")
        engine.dispose()
        auth = {"Authorization": f"Bearer {secret}"}

        # A request that hangs instead of failing fails the test with a read time-out.
        with (
            app_in_thread(create_app(settings)) as url,
            httpx.Client(base_url=url, timeout=OUTAGE_ANSWER_TIMEOUT_SECONDS) as api,
        ):
            submission_id = submit(api, auth, "before")
            location = f"/api/v1/submissions/{submission_id}"
            assert api.get(location, headers=auth).status_code == 200

            postgres.stop()  # like a crash: the pool's connections are dead sockets now
            during_outage = [
                api.get(location, headers=auth),
                api.post(
                    "/api/v1/submissions",
                    headers=auth,
                    json={"exercise": EXERCISE, "learner": "during", "code": CORRECT_CODE},
                ),
                api.get(location, headers=auth),
            ]
            for response in during_outage:
                assert response.status_code == 503, response.text
                assert int(response.headers["retry-after"]) > 0
                assert "database" in response.json()["detail"]

            postgres.start()
            # The same server process, not restarted: the very next requests reconnect.
            after = api.get(location, headers=auth)
            assert after.status_code == 200, after.text
            assert after.json()["id"] == submission_id, "accepted before the crash, kept"
            submit(api, auth, "after")
            listed = api.get("/api/v1/submissions", headers=auth)
            assert listed.status_code == 200, listed.text

    # The submission refused with 503 was not stored; the others were.
    learners = {item["learner"] for item in listed.json()}
    assert learners == {"before", "after"}


def test_a_database_that_takes_the_connection_and_never_answers_is_given_up_on() -> None:
    """A PostgreSQL host that black-holes (or a server hung at start-up) must fail a
    connection attempt, so that the request gets its 503, instead of holding it forever."""
    with socket.socket() as silent:
        # The kernel completes the handshake for the listen backlog; nobody ever speaks.
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        engine = create_db_engine(f"postgresql+psycopg://loopgrade@127.0.0.1:{port}/loopgrade")
        outcome: list[object] = []

        def connect() -> None:
            try:
                with engine.connect():
                    outcome.append("connected")
            except OperationalError as exc:
                outcome.append(exc)

        attempt = threading.Thread(target=connect, daemon=True)
        attempt.start()
        attempt.join(2 * OUTAGE_ANSWER_TIMEOUT_SECONDS)  # a hang fails here, not a slow answer
        # Read while the silent server still holds the connection (closing it ends any wait).
        answered = list(outcome)
        engine.dispose()
    assert answered, "the connection attempt was still waiting for the silent server"
    assert isinstance(answered[0], OperationalError), answered
    assert "timeout" in str(answered[0]).lower(), answered[0]
