"""A full grading queue refused in the web process's admission control with Celery workers on
PostgreSQL and Redis (app/admission.py, app/grading/queue_gauge.py): the gauge counts from the
intake's exact count and hears every worker's gradings end over the state channel. Several web
processes may accept a submission here, so a keyed submission always goes to the intake, and a
resend of an accepted one gets its answer; nothing refused is stored, nothing accepted is lost.

The queue is filled with rows the test adds; no worker runs until the test starts one to drain
it. Nothing is timed (the gauge's count is believed as long as the test takes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

import app.grading.queue_gauge as queue_gauge
from app.db import SessionFactory
from app.grading.queue_gauge import WaitingGauge
from app.main import create_app
from app.models import Submission, SubmissionStatus
from app.settings import Settings
from tests.app.conftest import EXERCISE
from tests.app.test_full_queue_admission import Transactions, add_waiting, waiting_in
from tests.hosts.conftest import Worker
from tests.hosts.test_faults import GRADING_TIMEOUT_SECONDS, MISSING_FUNCTION_CODE
from tests.servers import HTTP_TIMEOUT_SECONDS, app_in_thread

MAX_WAITING = 3
# Refusals the test sends until the gauge has a count: the first goes to the intake, and so
# may the next if the state channel's first subscription came after it (which forgets it).
TRIES_UNTIL_EARLY = 10


@pytest.fixture
def served(
    host_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FastAPI, httpx.Client]]:
    monkeypatch.setattr(queue_gauge, "GAUGE_FRESH_SECONDS", 3600.0)
    host_settings.max_waiting_submissions = MAX_WAITING
    served_app = create_app(host_settings)
    with (
        app_in_thread(served_app) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        yield served_app, client


def submit(
    client: httpx.Client, auth: dict[str, str], learner: str, key: str | None = None
) -> httpx.Response:
    headers = {**auth, **({"Idempotency-Key": key} if key else {})}
    body = {"exercise": EXERCISE, "learner": learner, "code": MISSING_FUNCTION_CODE}
    return client.post("/api/v1/submissions", json=body, headers=headers)


def wait_for(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_the_web_process_refuses_a_full_queue_early_and_keyed_resends_reach_the_intake(
    served: tuple[FastAPI, httpx.Client],
    sessions: SessionFactory,
    auth: dict[str, str],
    start_worker: Callable[..., Worker],
) -> None:
    served_app, client = served
    gauge: WaitingGauge = served_app.state.waiting_gauge
    accepted = submit(client, auth, "on-time", key="accepted-before-the-rush")
    assert accepted.status_code == 202
    add_waiting(sessions, MAX_WAITING)
    waiting = MAX_WAITING + 1  # no worker yet: the accepted one waits too
    assert waiting_in(sessions) == waiting
    transactions = Transactions(served_app)

    refusals = [submit(client, auth, "late-0")]
    while "at least" not in refusals[-1].json()["detail"]:
        assert len(refusals) < TRIES_UNTIL_EARLY, [r.json() for r in refusals]
        before = transactions.begun
        refusals.append(submit(client, auth, f"late-{len(refusals)}"))
    assert transactions.begun == before, "the early refusal opened a database session"
    assert {answer.status_code for answer in refusals} == {503}
    first, early = refusals[0], refusals[-1]
    assert first.json()["detail"].startswith(f"The graders are busy: {waiting} submissions")
    assert early.json()["detail"].startswith(f"The graders are busy: at least {waiting} ")
    seconds = int(early.headers["Retry-After"])
    assert early.json()["detail"].endswith(f"send it again in {seconds} s.")

    # Keyed: to the intake every time (another web process may have accepted the key).
    again = submit(client, auth, "on-time", key="accepted-before-the-rush")
    assert again.status_code == 202 and again.json()["id"] == accepted.json()["id"]
    for _ in range(2):
        before = transactions.begun
        keyed = submit(client, auth, "late-keyed", key="refused-while-full")
        assert keyed.status_code == 503 and transactions.begun > before
        assert keyed.json()["detail"].startswith(f"The graders are busy: {waiting} submissions")

    # A worker drains the queue; the web process hears each grading end over Redis, and a
    # resend is accepted once there is room.
    start_worker()
    wait_for("room heard", lambda: (gauge.waiting_at_least() or 0) < MAX_WAITING)
    wait_for("room", lambda: waiting_in(sessions) < MAX_WAITING)
    now_accepted = submit(client, auth, "late-keyed", key="refused-while-full")
    assert now_accepted.status_code == 202, now_accepted.text

    # Everything accepted is graded, once; nothing refused was stored.
    wait_for("all graded", lambda: waiting_in(sessions) == 0)
    with sessions() as session:
        learners = session.scalars(
            select(Submission.learner).where(Submission.learner.not_like("waiting-%"))
        ).all()
        assert sorted(learners) == ["late-keyed", "on-time"]
        statuses = session.scalars(select(Submission.status)).all()
        assert set(statuses) == {SubmissionStatus.GRADED}
        assert session.scalar(select(func.count()).select_from(Submission)) == MAX_WAITING + 2
