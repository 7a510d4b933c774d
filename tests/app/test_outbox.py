"""The outbox: written with the change it reports, delivered with retries and backoff to a
real HTTP receiver on 127.0.0.1, on a real SQLite."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from app import outbox
from app.db import SessionFactory
from app.grading.jobs import GradingJob, claim_submission, record_report
from app.grading.submissions import create_submission
from app.models import OutboxMessage, OutboxStatus, Submission
from app.outbox import (
    DeliveryDeferred,
    OutboxDelivery,
    PermanentFailure,
    ScoreChange,
    add_to_outbox,
    claim_due,
    deliver_one,
    register_delivery_kind,
    register_score_listener,
)
from app.settings import Settings
from graders.report import GradeReport
from tests.app.conftest import CORRECT_CODE, EXERCISE

KIND = "tests.http-post"


def post_to_receiver(sessions: SessionFactory, settings: Settings, payload: dict[str, Any]) -> None:
    """As a webhook delivers: POST the payload; a 4xx will never succeed, a 5xx may."""
    response = httpx.post(payload["url"], json=payload, timeout=10)
    if 400 <= response.status_code < 500:
        raise PermanentFailure(f"the receiver answered {response.status_code}")
    response.raise_for_status()


register_delivery_kind(KIND, post_to_receiver)


class Receiver:
    """An HTTP server that answers each POST with the next status of `statuses`."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.received: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append(json.loads(body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fast_retries(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"outbox_retry_base_seconds": 0.05, "outbox_retry_max_seconds": 0.2}
    )


def message(sessions: SessionFactory, message_id: int) -> OutboxMessage:
    with sessions() as session:
        row = session.get(OutboxMessage, message_id)
        assert row is not None
        return row


def wait_for_status(sessions: SessionFactory, message_id: int, status: str) -> OutboxMessage:
    deadline = time.monotonic() + 60
    while (row := message(sessions, message_id)).status != status:
        assert time.monotonic() < deadline, f"still {row.status} after {row.attempts} attempts"
        time.sleep(0.05)
    return row


def test_a_message_exists_only_if_its_transaction_commits(sessions: SessionFactory) -> None:
    with pytest.raises(RuntimeError), sessions.begin() as session:
        add_to_outbox(session, KIND, {"url": "http://127.0.0.1:9/"})
        raise RuntimeError("the change it reports failed")
    with sessions() as session:
        assert session.scalars(select(OutboxMessage)).all() == []
    with (
        pytest.raises(ValueError, match=r"unknown outbox kind 'tests\.typo'"),
        sessions() as session,
    ):
        add_to_outbox(session, "tests.typo", {})


def test_the_loop_retries_with_backoff_until_the_receiver_accepts(
    sessions: SessionFactory, fast_retries: Settings
) -> None:
    delivery = OutboxDelivery(sessions, fast_retries)
    delivery.start()
    try:
        with Receiver([503, 500, 200]) as receiver:
            with sessions.begin() as session:
                message_id = add_to_outbox(session, KIND, {"url": receiver.url, "score": 7}).id
            row = wait_for_status(sessions, message_id, OutboxStatus.DELIVERED)
    finally:
        delivery.stop()
    assert row.attempts == 3
    assert row.delivered_at is not None and row.last_error is None
    assert [r["score"] for r in receiver.received] == [7, 7, 7]


def test_a_refusal_for_good_is_recorded_and_not_retried(
    sessions: SessionFactory, fast_retries: Settings
) -> None:
    with Receiver([400, 200]) as receiver:
        with sessions.begin() as session:
            message_id = add_to_outbox(session, KIND, {"url": receiver.url}).id
        assert deliver_one(sessions, fast_retries)
        assert not deliver_one(sessions, fast_retries)  # nothing due any more
    row = message(sessions, message_id)
    assert (row.status, row.attempts) == (OutboxStatus.FAILED, 1)
    assert row.last_error == "the receiver answered 400"
    assert len(receiver.received) == 1


def test_after_its_last_attempt_a_failing_delivery_is_given_up(
    sessions: SessionFactory, fast_retries: Settings
) -> None:
    settings = fast_retries.model_copy(update={"outbox_max_attempts": 2})
    with Receiver([503, 503, 503]) as receiver:
        with sessions.begin() as session:
            message_id = add_to_outbox(session, KIND, {"url": receiver.url}).id
        assert deliver_one(sessions, settings)
        wait_until_due(sessions, message_id)
        assert deliver_one(sessions, settings)
    row = message(sessions, message_id)
    assert (row.status, row.attempts) == (OutboxStatus.FAILED, 2)
    assert "503" in (row.last_error or "")
    assert len(receiver.received) == 2


WAITING_KIND = "tests.waits-once"
WAITED: set[str] = set()  # the receivers a waits-once message has waited for


def wait_once_then_deliver(
    sessions: SessionFactory, settings: Settings, payload: dict[str, Any]
) -> None:
    """As a score waits for the line item another delivery is making: not yet, then done."""
    if payload["url"] not in WAITED:
        WAITED.add(payload["url"])
        raise DeliveryDeferred("another delivery goes first", retry_after_seconds=0.05)
    post_to_receiver(sessions, settings, payload)


register_delivery_kind(WAITING_KIND, wait_once_then_deliver)


def test_a_deferred_delivery_is_tried_again_uncounted(
    sessions: SessionFactory, settings: Settings
) -> None:
    """Deferred is neither an attempt nor a failure: after the wait it names, it goes."""
    failures = REGISTRY.get_sample_value(
        "loopgrade_outbox_delivery_failures_total", {"kind": WAITING_KIND}
    )
    with Receiver([]) as receiver:
        with sessions.begin() as session:
            message_id = add_to_outbox(session, WAITING_KIND, {"url": receiver.url}).id
        assert deliver_one(sessions, settings)
        waiting = message(sessions, message_id)
        assert (waiting.status, waiting.attempts) == (OutboxStatus.PENDING, 0)
        assert waiting.last_error == "waiting: another delivery goes first"
        assert receiver.received == []
        wait_until_due(sessions, message_id)
        assert deliver_one(sessions, settings)
    row = message(sessions, message_id)
    assert (row.status, row.attempts) == (OutboxStatus.DELIVERED, 1)
    assert len(receiver.received) == 1
    after = REGISTRY.get_sample_value(
        "loopgrade_outbox_delivery_failures_total", {"kind": WAITING_KIND}
    )
    assert after == failures  # None both times: never counted


def wait_until_due(sessions: SessionFactory, message_id: int) -> None:
    with sessions() as session:
        wait = outbox.next_due_in_seconds(session)
    assert wait is not None
    time.sleep(wait + 0.01)


def test_a_claim_whose_host_died_is_delivered_again(
    sessions: SessionFactory, settings: Settings
) -> None:
    with Receiver([]) as receiver:
        with sessions.begin() as session:
            message_id = add_to_outbox(session, KIND, {"url": receiver.url}).id
        with sessions.begin() as session:
            # This host claims it and dies before delivering.
            assert claim_due(session, claim_timeout_seconds=0.01) is not None
        time.sleep(0.05)
        assert deliver_one(sessions, settings)
    row = message(sessions, message_id)
    assert (row.status, row.attempts) == (OutboxStatus.DELIVERED, 2)


CORRECT_REPORT = GradeReport(
    exercise=EXERCISE,
    exercise_version="v",
    score=10,
    max_score=10,
    diagnosis="correct",
    checks=[],
    feedback="",
)


def _claimed_submission(sessions: SessionFactory) -> tuple[str, GradingJob]:
    """A stored submission and a worker's claim on it, as a grading holds before its result."""
    with sessions.begin() as session:
        submission_id = create_submission(
            session, exercise_id=EXERCISE, learner="a", code=CORRECT_CODE
        ).id
    with sessions.begin() as session:
        job = claim_submission(session, submission_id, lease_seconds=30)
    assert job is not None
    return submission_id, job


def test_a_result_and_its_message_are_stored_in_one_transaction(
    sessions: SessionFactory,
) -> None:
    reported: list[str] = []

    def report_score(session: Session, submission: Submission) -> None:
        reported.append(submission.id)
        add_to_outbox(session, KIND, {"url": "http://127.0.0.1:9/", "id": submission.id})

    register_score_listener(ScoreChange.GRADED, report_score)

    try:
        submission_id, job = _claimed_submission(sessions)
        with pytest.raises(RuntimeError), sessions.begin() as session:
            assert record_report(session, job, CORRECT_REPORT)
            raise RuntimeError("the grading transaction failed")
        with sessions() as session:
            assert session.scalars(select(OutboxMessage)).all() == []
        with sessions.begin() as session:
            assert record_report(session, job, CORRECT_REPORT)
        with sessions() as session:
            payloads = [m.payload for m in session.scalars(select(OutboxMessage))]
        assert payloads == [{"url": "http://127.0.0.1:9/", "id": submission_id}]
        assert reported == [submission_id, submission_id]
    finally:
        outbox.SCORE_LISTENERS[ScoreChange.GRADED].remove(report_score)


def test_the_listeners_share_one_load_of_the_submission(sessions: SessionFactory) -> None:
    # Each listener's own load by id went to the database again (the identity map keeps no
    # object nobody holds): the full row and its JSON read twice, under SQLite's write lock.
    seen: list[Submission] = []
    listeners: list[outbox.ScoreListener] = [
        lambda _session, submission: seen.append(submission) for _ in "ab"
    ]
    for listener in listeners:
        register_score_listener(ScoreChange.GRADED, listener)
    submission_id, job = _claimed_submission(sessions)
    reads: list[str] = []
    engine = sessions.kw["bind"]

    def count_reads(*args: Any) -> None:
        statement = str(args[2])
        if statement.startswith("SELECT") and "FROM submissions" in statement:
            reads.append(statement)

    event.listen(engine, "before_cursor_execute", count_reads)
    try:
        with sessions.begin() as session:
            assert record_report(session, job, CORRECT_REPORT)
    finally:
        event.remove(engine, "before_cursor_execute", count_reads)
        for listener in listeners:
            outbox.SCORE_LISTENERS[ScoreChange.GRADED].remove(listener)
    assert len(reads) == 1
    assert [s.id for s in seen] == [submission_id, submission_id]
    assert [(s.status, s.score) for s in seen] == [("graded", 10)] * 2


def test_nothing_registered_refuses_delivery_and_storing_a_grade(
    sessions: SessionFactory, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process that forgot app.reactions.install_reactions(): loud, never silent.
    monkeypatch.setattr(outbox, "DELIVERY_KINDS", {})
    monkeypatch.setattr(outbox, "SCORE_LISTENERS", {change: [] for change in ScoreChange})
    with pytest.raises(outbox.NothingRegistered, match="install_reactions"):
        OutboxDelivery(sessions, settings).start()
    submission_id, job = _claimed_submission(sessions)
    with pytest.raises(outbox.NothingRegistered), sessions.begin() as session:
        record_report(session, job, CORRECT_REPORT)
    with sessions() as session:
        assert session.get(Submission, submission_id).status == "running"  # type: ignore[union-attr]
