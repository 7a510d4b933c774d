"""A full grading queue refuses a submission in admission control, before a database session or a
sign-in (app/admission.py, app/grading/queue_gauge.py): the intake's sentence and a `Retry-After`
from the queue's depth and drain rate. A resend of an accepted submission with its
Idempotency-Key still gets its answer; room is seen again as soon as gradings end; nothing
refused is stored, nothing accepted is lost.

The queue is filled with rows the test adds and hands to no worker (they stay queued); it drains
when the test hands some of them to the server's grading threads. Nothing is timed: the gauge's
count is believed as long as the test takes (`GAUGE_FRESH_SECONDS`, raised here: every grading's
end is heard by this server), and the drain rate's window holds every grading of the test.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import event, func, select

import app.grading.queue_gauge as queue_gauge
import app.grading.submissions as submissions_module
import app.retry_after as retry_after
from app.db import SessionFactory
from app.grading.queue_gauge import WaitingGauge
from app.main import create_app
from app.models import Submission, SubmissionStatus
from app.retry_after import (
    JITTER_SECONDS,
    MAX_RETRY_AFTER_SECONDS,
    UNKNOWN_RATE_RETRY_AFTER_SECONDS,
)
from app.settings import Settings
from tests.app.conftest import EXERCISE, GRADING_TIMEOUT_SECONDS, csrf_token
from tests.servers import HTTP_TIMEOUT_SECONDS, app_in_thread

MAX_WAITING = 3
# Rows ahead of the cap: the first refused waits for this many gradings and one more.
BEYOND_CAP = 20
# No train_step: graded at once, and cheaply.
BAD_CODE = "def other_step(model, optimizer, loss_fn, x, y):\n    return 0.0\n"


@pytest.fixture
def served(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FastAPI, httpx.Client]]:
    monkeypatch.setattr(queue_gauge, "GAUGE_FRESH_SECONDS", 3600.0)
    monkeypatch.setattr(retry_after, "DRAIN_WINDOW_SECONDS", 3600.0)
    # This test's refusals are the first the queue's return schedule holds.
    monkeypatch.setattr(submissions_module, "QUEUE_RETURNS", retry_after.ReturnSchedule())
    settings.max_waiting_submissions = MAX_WAITING
    settings.submission_rate_limit = 0
    served_app = create_app(settings)
    with (
        app_in_thread(served_app) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        yield served_app, client


class Transactions:
    """Transactions the server's request sessions begin: any database work of a request, its
    sign-in's lookup first."""

    def __init__(self, served_app: FastAPI) -> None:
        self.begun = 0
        event.listen(served_app.state.sessions, "after_begin", self._count)

    def _count(self, *_: object) -> None:
        self.begun += 1


def add_waiting(sessions: SessionFactory, count: int) -> list[str]:
    """`count` submissions queued and handed to no worker, as if the graders were far behind."""
    rows = [
        Submission(
            exercise_id=EXERCISE,
            exercise_version="v-test",
            learner=f"waiting-{n}",
            code=BAD_CODE,
            status=SubmissionStatus.QUEUED,
            attempts=0,
        )
        for n in range(count)
    ]
    with sessions.begin() as session:
        session.add_all(rows)
    return [row.id for row in rows]


def waiting_in(sessions: SessionFactory) -> int:
    with sessions() as session:
        statuses = [SubmissionStatus.QUEUED, SubmissionStatus.RUNNING]
        count = session.scalar(
            select(func.count()).select_from(Submission).where(Submission.status.in_(statuses))
        )
        return count or 0


def submit(
    client: httpx.Client, auth: dict[str, str], learner: str, key: str | None = None
) -> httpx.Response:
    headers = {**auth, **({"Idempotency-Key": key} if key else {})}
    body = {"exercise": EXERCISE, "learner": learner, "code": BAD_CODE}
    return client.post("/api/v1/submissions", json=body, headers=headers)


def wait_for(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def graded(client: httpx.Client, auth: dict[str, str], submission_id: str) -> bool:
    answer = client.get(f"/api/v1/submissions/{submission_id}", headers=auth)
    return bool(answer.json()["status"] == SubmissionStatus.GRADED)


def said_retry_after(answer: httpx.Response) -> int:
    seconds = int(answer.headers["Retry-After"])
    assert 1 <= seconds <= MAX_RETRY_AFTER_SECONDS
    assert answer.json()["detail"].endswith(f"send it again in {seconds} s.")
    return seconds


def test_a_full_queue_refuses_before_the_database_and_an_accepted_resend_gets_its_answer(
    served: tuple[FastAPI, httpx.Client], sessions: SessionFactory, auth: dict[str, str]
) -> None:
    served_app, client = served
    gauge: WaitingGauge = served_app.state.waiting_gauge
    accepted = submit(client, auth, "on-time", key="accepted-before-the-rush")
    assert accepted.status_code == 202
    accepted_id = accepted.json()["id"]
    wait_for("the first submission graded", lambda: graded(client, auth, accepted_id))
    fillers = add_waiting(sessions, MAX_WAITING + BEYOND_CAP)
    # Two gradings end: the drain rate is known, the queue still over its cap.
    for filler in fillers[:2]:
        served_app.state.dispatcher.enqueue(filler)
    waiting = len(fillers) - 2
    wait_for("two fillers graded", lambda: waiting_in(sessions) == waiting)
    transactions = Transactions(served_app)

    # The first goes to the intake (the gauge has no count yet): its exact count refuses it.
    first = submit(client, auth, "late-0")
    assert first.status_code == 503
    assert first.json()["detail"].startswith(
        f"The graders are busy: {waiting} submissions are waiting to be graded."
    )
    assert transactions.begun > 0
    said_retry_after(first)

    # The rest are refused before a session or a sign-in, with the same sentence (the count a
    # lower bound), each told to come back when the queue should have room for it.
    before = transactions.begun
    refused = [submit(client, auth, f"late-{n}") for n in range(1, 9)]
    assert transactions.begun == before
    assert {answer.status_code for answer in refused} == {503}
    told = [said_retry_after(answer) for answer in refused]
    for answer in refused:
        assert answer.json()["detail"].startswith(
            f"The graders are busy: at least {waiting} submissions are waiting to be graded. "
            "Yours was not stored"
        )
    # From the depth and the rate the gauge measured from the gradings it heard end (the first
    # submission's and two fillers'), not a constant: no one is told to come back before those
    # ahead of it have drained at that rate; with too few heard to tell, within seconds.
    ahead = waiting - MAX_WAITING + 1
    per_second = gauge.drained_per_second()
    if per_second is None:
        assert set(told) <= set(range(1, UNKNOWN_RATE_RETRY_AFTER_SECONDS + 1))
    else:
        # The k-th is told no later than when those ahead, the intake's refused one and the
        # k - 1 refused before it here have drained (places at the rate measured, jittered).
        for k, seconds in enumerate(told, start=1):
            assert math.ceil(ahead / per_second) <= seconds, k
            assert seconds <= math.ceil((ahead + k) / per_second + JITTER_SECONDS), k

    # The liveness probe meanwhile: answered without the database (and without a slot).
    alive = client.get("/healthz")
    assert (alive.status_code, alive.json()) == (200, {"status": "ok"})
    assert transactions.begun == before

    # A resend of a submission accepted before the queue filled gets its answer, never a 503.
    again = submit(client, auth, "on-time", key="accepted-before-the-rush")
    assert again.status_code == 202 and again.json()["id"] == accepted_id
    assert again.headers["Idempotent-Replayed"] == "true"

    # A keyed submission goes to the intake, which refuses it; its resend is refused early.
    keyed = submit(client, auth, "late-keyed", key="refused-while-full")
    assert keyed.status_code == 503
    assert keyed.json()["detail"].startswith(f"The graders are busy: {waiting} submissions")
    before = transactions.begun
    keyed_again = submit(client, auth, "late-keyed", key="refused-while-full")
    assert keyed_again.status_code == 503 and transactions.begun == before
    assert "at least" in keyed_again.json()["detail"]

    # A plain form's post (no script) goes to the intake, which gives the page back with the
    # learner's code in it.
    page = f"/exercises/{EXERCISE}"
    before = transactions.begun
    form = client.post(page, data={"code": BAD_CODE, "csrf_token": csrf_token(client, page)})
    assert form.status_code == 503 and "The graders are busy" in form.text
    assert "def other_step" in form.text and transactions.begun > before

    # Gradings end, heard by the server: once there is room, the resend goes to the intake and
    # is accepted; its own resend gets the same submission.
    for filler in fillers[2 : 2 + ahead]:
        served_app.state.dispatcher.enqueue(filler)
    wait_for("room seen", lambda: (gauge.waiting_at_least() or 0) < MAX_WAITING)
    now_accepted = submit(client, auth, "late-keyed", key="refused-while-full")
    assert now_accepted.status_code == 202
    replayed = submit(client, auth, "late-keyed", key="refused-while-full")
    assert replayed.status_code == 202 and replayed.json()["id"] == now_accepted.json()["id"]

    # Nothing refused was stored; each accepted one is stored once.
    with sessions() as session:
        learners = session.scalars(
            select(Submission.learner).where(Submission.learner.not_like("waiting-%"))
        ).all()
        assert sorted(learners) == ["late-keyed", "on-time"]
        stored = session.scalar(select(func.count()).select_from(Submission))
        assert stored == len(fillers) + 2
