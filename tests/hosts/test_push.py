"""A Celery worker's result pushed to an open progress stream, over the broker's Redis.

The API host here reads a stream's row from the database only every 600 s (and sends a
heartbeat as rarely), far longer than any of these tests waits: an event that arrives came
from a state message on Redis (app/grading/state_channel.py), not from the fallback check.
The learner follows the grading as the exercise page's script does: it posts the form for
JSON and reads the `events` stream it is given.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import httpx
import pytest
import redis

from app.db import SessionFactory
from app.grading.jobs import claim_submission, record_error
from app.grading.queue import GradingOutcome, run_grading_job
from app.grading.state_channel import StatePublisher, state_channel
from app.grading.submissions import create_submission
from app.models import SubmissionStatus
from app.settings import Settings
from tests.app.conftest import EXERCISE, csrf_token
from tests.app.test_events import read_events
from tests.hosts.conftest import Worker
from tests.hosts.test_faults import GRADING_TIMEOUT_SECONDS, MISSING_FUNCTION_CODE, status_of
from tests.services import RedisServer

# Longer than any test here: only a push can bring a stream news in time.
PUSH_ONLY_ENV = {
    "LOOPGRADE_EVENT_CHECK_INTERVAL_SECONDS": "600",
    "LOOPGRADE_EVENT_HEARTBEAT_SECONDS": "600",
}
# How long a test waits for Redis to say the API host's subscriber is (back) on the channel;
# generous: its reconnection backoff and a busy machine. Not a timing assertion.
SUBSCRIBED_TIMEOUT_SECONDS = 120.0

Events = Iterator[tuple[str, dict[str, Any]]]


@pytest.fixture
def redis_url(own_redis: RedisServer) -> str:
    """A Redis of each test's own: one test restarts it, another publishes forgeries on it."""
    return own_redis.url


@pytest.fixture
def host_env(host_env: dict[str, str]) -> dict[str, str]:
    return {**host_env, **PUSH_ONLY_ENV}


@pytest.fixture
def learner(api: httpx.Client) -> Iterator[httpx.Client]:
    """A browser without a sign-in: its learner cookie makes its submissions its own."""
    with httpx.Client(base_url=api.base_url, timeout=GRADING_TIMEOUT_SECONDS) as client:
        yield client


def submit_on_page(learner: httpx.Client) -> dict[str, str]:
    """Post the exercise form as the page's script does; its answer: id, url, events."""
    page = f"/exercises/{EXERCISE}"
    answer = learner.post(
        page,
        data={"code": MISSING_FUNCTION_CODE, "csrf_token": csrf_token(learner, page)},
        headers={"Accept": "application/json"},
    )
    assert answer.status_code == 202, answer.text
    accepted: dict[str, str] = answer.json()
    return accepted


def wait_until_subscribed(redis_url: str, channel: str) -> None:
    """Until Redis counts a subscriber on `channel` (the API host's, the only one here)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    deadline = time.monotonic() + SUBSCRIBED_TIMEOUT_SECONDS
    try:
        while True:
            with suppress(redis.ConnectionError):  # Redis still starting
                if dict(client.pubsub_numsub(channel)).get(channel.encode(), 0) >= 1:
                    return
            assert time.monotonic() < deadline, f"no subscriber on {channel}"
            time.sleep(0.1)
    finally:
        client.close()


def next_events_until_done(events: Events) -> list[tuple[str, dict[str, Any]]]:
    seen = []
    for name, data in events:
        seen.append((name, data))
        if name == "done":
            return seen
    raise AssertionError(f"the stream ended without a result: {seen}")


def test_a_result_graded_by_a_worker_on_another_host_is_pushed_to_the_open_stream(
    api: httpx.Client,
    learner: httpx.Client,
    sessions: SessionFactory,
    host_settings: Settings,
    redis_url: str,
    start_worker: Callable[..., Worker],
) -> None:
    # No worker yet: the submission waits in the queue while the page opens its stream.
    accepted = submit_on_page(learner)
    wait_until_subscribed(redis_url, state_channel(host_settings))
    with learner.stream("GET", accepted["events"]) as response:
        assert response.status_code == 200
        events = read_events(response.iter_lines())
        assert next(events) == (
            "queued",
            {"status": "queued", "position": 1, "elapsed_seconds": None},
        )
        worker = start_worker()  # another process, as on another host
        seen = next_events_until_done(events)

    names = [name for name, _ in seen]
    # "running" may be skipped when the grade is stored before the stream re-reads the row.
    assert names in (["running", "done"], ["done"]), names
    done = seen[-1][1]
    assert done["status"] == "graded"
    assert done["url"] == accepted["url"]
    assert 'data-code="missing-function"' in done["html"]
    assert status_of(sessions, accepted["id"]) == "graded"
    assert worker.log().count(f"submission {accepted['id']}: grading") == 1


def test_forged_state_messages_change_nothing_the_page_sees(
    api: httpx.Client,
    learner: httpx.Client,
    sessions: SessionFactory,
    host_settings: Settings,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No worker at all: nothing grades these two unless the test does.
    watched = submit_on_page(learner)
    other = submit_on_page(learner)
    channel = state_channel(host_settings)
    wait_until_subscribed(redis_url, channel)
    forger = redis.Redis.from_url(redis_url)
    caplog.set_level(logging.WARNING, logger="app.grading.state_channel")

    def forge(message: object) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        forger.publish(channel, data)

    with learner.stream("GET", watched["events"]) as response:
        events = read_events(response.iter_lines())
        assert next(events)[0] == "queued"
        # Well-formed lies: the watched one "graded", the other one "graded", an unknown one.
        forge({"id": watched["id"], "status": "graded"})
        forge({"id": watched["id"].upper(), "status": "error"})  # the same UUID, written apart
        forge({"id": other["id"], "status": "graded"})
        forge({"id": str(uuid.uuid4()), "status": "graded"})
        # Not ours at all: each is dropped with a warning.
        malformed: list[object] = [
            b"\xff\xfe garbage",
            b"[]",
            {"id": "../../submissions/1", "status": "graded"},
            {"id": watched["id"], "status": "passed-with-honours"},
            {"id": watched["id"]},
            {"id": watched["id"], "status": "graded", "padding": "x" * 1000},
        ]
        for message in malformed:
            forge(message)

        # Then a real change, told as a worker tells it: after the forgeries on the same
        # channel, so the stream's next event comes after it has re-read the row for each.
        with sessions.begin() as session:
            job = claim_submission(session, watched["id"], lease_seconds=60)
        assert job is not None
        with sessions.begin() as session:
            assert record_error(session, job, "RuntimeError: a test")
        publisher = StatePublisher(host_settings)
        publisher.state_changed(watched["id"], SubmissionStatus.ERROR)
        publisher.close()

        # Nothing between "queued" and the truth; and the truth is the row's, not a message's.
        name, done = next(events)
        assert name == "done", (name, done)
        assert done["status"] == "error"
    forger.close()

    assert status_of(sessions, other["id"]) == "queued"
    ignored = [r for r in caplog.records if "ignored one that is not ours" in r.getMessage()]
    assert len(ignored) == len(malformed)


def test_after_a_redis_restart_the_subscriber_reconnects_and_the_next_grade_is_pushed(
    api: httpx.Client,
    learner: httpx.Client,
    sessions: SessionFactory,
    host_settings: Settings,
    own_redis: RedisServer,
    start_worker: Callable[..., Worker],
) -> None:
    channel = state_channel(host_settings)
    accepted = submit_on_page(learner)
    wait_until_subscribed(own_redis.url, channel)
    with learner.stream("GET", accepted["events"]) as response:
        events = read_events(response.iter_lines())
        assert next(events)[0] == "queued"

        # Redis dies with the stream open (and with the submission's message: no persistence).
        own_redis.kill()
        own_redis.start()
        # The subscriber finds it again by itself (the page's stream stays open meanwhile).
        wait_until_subscribed(own_redis.url, channel)
        # The worker's sweep sends the lost message again; its grade is pushed, not checked:
        # this API host's database check is 600 s away.
        start_worker()
        seen = next_events_until_done(events)

    assert seen[-1][1]["status"] == "graded"
    assert status_of(sessions, accepted["id"]) == "graded"


def test_a_worker_whose_redis_is_away_still_stores_its_grade(
    sessions: SessionFactory,
    host_settings: Settings,
    own_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with sessions.begin() as session:
        submission_id = create_submission(
            session,
            exercise_id=EXERCISE,
            learner="redis-away",
            code=MISSING_FUNCTION_CODE,
        ).id
    own_redis.kill()
    caplog.set_level(logging.WARNING, logger="app.grading.state_channel")
    # As the Celery task runs it (app/grading/celery_queue.py), here in this process.
    publisher = StatePublisher(host_settings)
    run = run_grading_job(
        sessions, submission_id, host_settings, on_state_change=publisher.state_changed
    )
    publisher.close()

    assert run.outcome is GradingOutcome.GRADED
    assert status_of(sessions, submission_id) == "graded"
    # Both changes (running, graded) were attempted and logged as not told.
    untold = [r.args for r in caplog.records if "could not tell" in r.getMessage()]
    assert [(args[0], args[1]) for args in untold if isinstance(args, tuple)] == [
        (submission_id, "running"),
        (submission_id, "graded"),
    ]
