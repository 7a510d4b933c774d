"""A submission's progress stream (GET /submissions/{id}/events) over a real server.

The servers here have a broker URL that leads nowhere, so none of their threads grades: the
test decides when a submission is claimed and graded, and so which states the stream can see,
without depending on timing. Grading runs `run_grading_job` in this process, which is the
server's process (it runs in a thread here), as its own grading threads would.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from app.access import LEARNER_COOKIE
from app.db import SessionFactory
from app.grading.jobs import claim_submission, record_error
from app.grading.queue import run_grading_job
from app.grading.submissions import create_submission
from app.main import create_app
from app.progress import ProgressStreams
from app.settings import Settings
from tests.app.conftest import EXERCISE, MISSING_ZERO_GRAD_CODE
from tests.servers import app_in_thread, uvicorn_in_thread

LEARNER = "web:events-learner-1"
# Nothing listens on port 1: sends fail fast and are logged, and no thread of the server grades.
NOWHERE_BROKER = "redis://127.0.0.1:1/0"
# Longer than any test: an event that arrives came from a push, not from a periodic check.
NEVER_SECONDS = 3600.0


def events_settings(settings: Settings, **update: Any) -> Settings:
    return settings.model_copy(
        update={
            "broker_url": NOWHERE_BROKER,
            "event_check_interval_seconds": NEVER_SECONDS,
            "event_heartbeat_seconds": NEVER_SECONDS,
            **update,
        }
    )


@contextmanager
def served(settings: Settings) -> Iterator[tuple[FastAPI, httpx.Client]]:
    app = create_app(settings)
    with app_in_thread(app) as url, httpx.Client(base_url=url, timeout=120) as client:
        client.cookies.set(LEARNER_COOKIE, LEARNER)
        yield app, client


def queued_submission(sessions: SessionFactory, learner: str = LEARNER) -> str:
    with sessions.begin() as session:
        return create_submission(
            session,
            exercise_id=EXERCISE,
            learner=learner,
            code=MISSING_ZERO_GRAD_CODE,
        ).id


def read_events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs from a text/event-stream, as a browser's EventSource parses it."""
    name, data = "message", ""
    for line in lines:
        if line == "":
            if data:
                yield name, json.loads(data)
            name, data = "message", ""
        elif line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data += line.removeprefix("data: ")


def test_a_grading_is_pushed_to_the_stream_queued_then_running_then_done(
    settings: Settings, sessions: SessionFactory
) -> None:
    with served(events_settings(settings)) as (app, client):
        submission_id = queued_submission(sessions)
        with client.stream("GET", f"/submissions/{submission_id}/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = read_events(response.iter_lines())
            assert next(events) == (
                "queued",
                {"status": "queued", "position": 1, "elapsed_seconds": None},
            )

            # Graded as the server's own grading threads do: they tell its streams.
            streams: ProgressStreams = app.state.progress_streams
            grading = threading.Thread(
                target=run_grading_job,
                args=(app.state.sessions, submission_id, settings),
                kwargs={"on_state_change": streams.state_changed},
            )
            grading.start()
            seen = list(events)
            grading.join()

    names = [name for name, _ in seen]
    # "running" may be skipped when the grading is over before the stream reads the row.
    assert names in (["running", "done"], ["done"]), names
    done = seen[-1][1]
    assert done["status"] == "graded"
    assert done["url"] == f"/submissions/{submission_id}"
    assert 'class="score-value"' in done["html"]
    assert 'data-code="missing-zero-grad"' in done["html"]


def test_a_result_written_by_another_host_reaches_the_stream_by_its_database_check(
    settings: Settings, sessions: SessionFactory
) -> None:
    with served(events_settings(settings, event_check_interval_seconds=0.2)) as (_, client):
        submission_id = queued_submission(sessions)
        with client.stream("GET", f"/submissions/{submission_id}/events") as response:
            events = read_events(response.iter_lines())
            assert next(events)[0] == "queued"
            # Another host claims it, then fails it: nothing in the server's process says so.
            with sessions.begin() as session:
                job = claim_submission(session, submission_id, lease_seconds=60)
            assert job is not None
            name, running = next(events)
            assert name == "running" and running["elapsed_seconds"] >= 0
            with sessions.begin() as session:
                assert record_error(session, job, "RuntimeError: a test")
            name, done = next(events)
            assert name == "done" and done["status"] == "error"
            assert list(events) == []  # and the stream ends


def test_a_finished_submission_gets_done_at_once_and_the_stream_closes(
    settings: Settings, sessions: SessionFactory
) -> None:
    with served(events_settings(settings)) as (_, client):
        submission_id = queued_submission(sessions)
        with sessions.begin() as session:
            job = claim_submission(session, submission_id, lease_seconds=60)
            assert job is not None
            record_error(session, job, "RuntimeError: a test")
        with client.stream("GET", f"/submissions/{submission_id}/events") as response:
            seen = list(read_events(response.iter_lines()))
    assert [name for name, _ in seen] == ["done"]
    assert "could not grade this submission" in seen[0][1]["html"]


def test_only_those_who_may_see_the_submission_get_its_stream(
    settings: Settings, sessions: SessionFactory
) -> None:
    with served(events_settings(settings)) as (_, client):
        others = queued_submission(sessions, learner="web:someone-else-2")
        assert client.get(f"/submissions/{others}/events").status_code == 404
        client.cookies.clear()
        assert client.get(f"/submissions/{others}/events").status_code == 404
        assert client.get("/submissions/no-such-id/events").status_code == 404


def test_streams_are_bounded_in_number_and_in_lifetime(
    settings: Settings, sessions: SessionFactory
) -> None:
    bounded = events_settings(settings, max_event_streams=1, event_stream_max_seconds=0.5)
    with served(bounded) as (_, client):
        submission_id = queued_submission(sessions)
        with client.stream("GET", f"/submissions/{submission_id}/events") as response:
            events = read_events(response.iter_lines())
            assert next(events)[0] == "queued"
            refused = client.get(f"/submissions/{submission_id}/events")
            assert refused.status_code == 503
            assert refused.headers["retry-after"]
            # Past its lifetime the stream ends by itself (the browser reconnects).
            assert [name for name, _ in events] == []


def test_streams_are_bounded_per_submission_and_per_client(
    settings: Settings, sessions: SessionFactory
) -> None:
    bounded = events_settings(
        settings, max_event_streams_per_submission=1, max_event_streams_per_client=2
    )
    with served(bounded) as (_, client):
        first, second, third = (queued_submission(sessions) for _ in range(3))

        def opened(submission_id: str) -> Any:
            return client.stream("GET", f"/submissions/{submission_id}/events")

        # Each stream's events are kept: a reader dropped closes its stream.
        with opened(first) as response:
            first_events = read_events(response.iter_lines())
            assert next(first_events)[0] == "queued"
            # One stream per submission: a second tab of it asks every few seconds instead.
            assert client.get(f"/submissions/{first}/events").status_code == 503
            with opened(second) as other:
                second_events = read_events(other.iter_lines())
                assert next(second_events)[0] == "queued"
                # Two per client: one visitor cannot open all of the process's streams.
                refused = client.get(f"/submissions/{third}/events")
                assert refused.status_code == 503
                assert refused.headers["retry-after"]
        # Closed streams are counted out.
        with opened(third) as response:
            assert next(read_events(response.iter_lines()))[0] == "queued"


def test_shutdown_ends_open_streams_instead_of_waiting_for_them(
    settings: Settings, sessions: SessionFactory
) -> None:
    app = create_app(events_settings(settings, event_stream_max_seconds=NEVER_SECONDS))
    submission_id = queued_submission(sessions)
    with (
        uvicorn_in_thread(app) as (server, thread, url),
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        client.cookies.set(LEARNER_COOKIE, LEARNER)
        with client.stream("GET", f"/submissions/{submission_id}/events") as response:
            events = read_events(response.iter_lines())
            assert next(events)[0] == "queued"
            server.should_exit = True
            # The stream ends (rather than the server waiting an hour for it)...
            assert list(events) == []
        # ...and so does the server.
        thread.join(timeout=60)
        assert not thread.is_alive()
