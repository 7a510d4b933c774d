"""A submission's grading progress pushed as server-sent events, below the surfaces that
serve it: the page's stream (app/web/events.py, `done` with the rendered result) and the API's
(app/api/learner_routes.py, `done` with the submission's address).

A stream sends `queued` (with the position in the queue), `running` (with the seconds since the
grading started), a `heartbeat` when nothing changed for a while, and `done` with what its
surface reads of the finished submission (`ReadDone`), then closes. A stream for a finished
submission sends `done` at once.

Pushed, not polled by the browser: the grading threads of this process wake the streams of a
submission as soon as they commit a change to it (`ProgressStreams.state_changed`, hooked into
the dispatcher). A Celery worker on another host publishes its changes on Redis, and this
process's subscriber thread wakes the streams the same way (app/grading/state_channel.py).
Whatever wakes a stream, it re-reads the row, and it reads it every
`event_check_interval_seconds` anyway: the fallback for a message lost. Streams are bounded
in number (`max_event_streams` in all, `max_event_streams_per_client` per client address,
`max_event_streams_per_submission` per submission; then 503) and in lifetime
(`event_stream_max_seconds`, then the browser reconnects), and all of them end when the server
shuts down (`StreamClosingServer`), so that uvicorn does not wait on them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import Any

import anyio.to_thread
import uvicorn
from fastapi import Request
from fastapi.responses import StreamingResponse
from sqlalchemy import func, select

from app.access import client_address
from app.admission import STREAM_READ_THREADS
from app.db import SessionFactory
from app.errors import AppError
from app.models import FINISHED, Submission, SubmissionStatus, utc_now
from app.settings import Settings

# What a surface's stream sends with `done`: the finished submission as that surface shows it.
ReadDone = Callable[[SessionFactory, str], dict[str, Any]]


class ProgressEvent(enum.StrEnum):
    """The events a progress stream sends (static/result.js listens for each)."""

    QUEUED = SubmissionStatus.QUEUED.value  # data: position
    RUNNING = SubmissionStatus.RUNNING.value  # data: elapsed_seconds
    HEARTBEAT = "heartbeat"  # nothing changed; data: the progress again
    DONE = "done"  # data: what the surface reads (ReadDone): the page's result, or its address
    BUSY = "busy"  # too many streams: the page asks for the result instead


class TooManyStreams(AppError):
    status_code = 503
    title = "Busy"

    def __init__(self) -> None:
        super().__init__(
            "Too many pages are following their grading right now; this page asks every few "
            "seconds instead.",
            headers={"Retry-After": "5"},
        )


@dataclass(frozen=True)
class Progress:
    """Where a submission is: its status, its place in the queue (1: next), its grading time."""

    status: str
    position: int | None = None
    elapsed_seconds: int | None = None


class ProgressStreams:
    """The open progress streams of this process, and what wakes them."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._open = 0
        self._open_by_client: collections.Counter[str] = collections.Counter()
        self._closing = False
        self._reads: anyio.CapacityLimiter | None = None  # made in the event loop

    @property
    def open_count(self) -> int:
        return self._open

    def state_changed(self, submission_id: str, status: SubmissionStatus) -> None:
        """From any thread: the submission changed; wake its streams. They re-read the row:
        `status` (what the changer says, perhaps a message from another host) is not used."""
        with self._lock:
            waiters = list(self._waiters.get(submission_id, ()))
        _wake(waiters)

    def wake_all(self) -> None:
        """Every open stream re-reads its row (news from other hosts may have been lost)."""
        with self._lock:
            waiters = [waiter for group in self._waiters.values() for waiter in group]
        _wake(waiters)

    def close_all(self) -> None:
        """End every stream (the server is shutting down) and refuse new ones."""
        with self._lock:
            self._closing = True
        self.wake_all()

    def _has_room(self, client: str, submission_id: str) -> bool:
        """Under the lock: the server is not stopping, and this stream is within the caps of
        the process, of its client's address and of its submission."""
        settings = self._settings
        return not (
            self._closing
            or self._open >= settings.max_event_streams
            or self._open_by_client[client] >= settings.max_event_streams_per_client
            or len(self._waiters.get(submission_id, ()))
            >= settings.max_event_streams_per_submission
        )

    def check_room(self, client: str, submission_id: str) -> None:
        """Refuse a new stream (503) when a cap is reached (`_has_room`) or the server stops."""
        with self._lock:
            if not self._has_room(client, submission_id):
                raise TooManyStreams()

    async def stream(
        self, sessions: SessionFactory, submission_id: str, client: str, read_done: ReadDone
    ) -> AsyncIterator[str]:
        """The events of one submission, counted as open from its first byte to its end."""
        settings = self._settings
        if self._reads is None:
            self._reads = anyio.CapacityLimiter(STREAM_READ_THREADS)
        reads = self._reads
        event = asyncio.Event()
        waiter = (asyncio.get_running_loop(), event)
        with self._lock:
            # Counted here, not in the route: a stream never started is never ended either.
            if not self._has_room(client, submission_id):
                yield message(ProgressEvent.BUSY, {})
                return
            self._open += 1
            self._open_by_client[client] += 1
            self._waiters.setdefault(submission_id, set()).add(waiter)
        try:
            # How long the browser waits before it reconnects, should the stream break.
            yield "retry: 2000\n\n"
            deadline = time.monotonic() + settings.event_stream_max_seconds
            last: Progress | None = None
            last_sent = time.monotonic()
            while not self._closing:
                event.clear()
                progress = await anyio.to_thread.run_sync(
                    read_progress, sessions, submission_id, limiter=reads
                )
                if progress.status in FINISHED:
                    done = await anyio.to_thread.run_sync(
                        read_done, sessions, submission_id, limiter=reads
                    )
                    yield message(ProgressEvent.DONE, done)
                    return
                now = time.monotonic()
                # The seconds tick in the browser: a new event when the state or place changes.
                if last is None or (progress.status, progress.position) != (
                    last.status,
                    last.position,
                ):
                    yield message(ProgressEvent(progress.status), asdict(progress))
                    last, last_sent = progress, now
                elif now - last_sent >= settings.event_heartbeat_seconds:
                    yield message(ProgressEvent.HEARTBEAT, asdict(progress))
                    last_sent = now
                if now >= deadline:
                    return
                wait_seconds = min(
                    settings.event_check_interval_seconds,
                    settings.event_heartbeat_seconds,
                    deadline - now,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=wait_seconds)
        finally:
            with self._lock:
                group = self._waiters.get(submission_id)
                if group is not None:
                    group.discard(waiter)
                    if not group:
                        del self._waiters[submission_id]
                self._open -= 1
                self._open_by_client[client] -= 1
                if not self._open_by_client[client]:
                    del self._open_by_client[client]


def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]) -> None:
    for loop, event in waiters:
        loop.call_soon_threadsafe(event.set)


def message(event: ProgressEvent, data: dict[str, Any]) -> str:
    """One server-sent event; JSON on one `data:` line (it escapes every line break)."""
    return f"event: {event.value}\ndata: {json.dumps(data)}\n\n"


def read_progress(sessions: SessionFactory, submission_id: str) -> Progress:
    with sessions() as session:
        row = session.execute(
            select(Submission.status, Submission.queued_at, Submission.started_at).where(
                Submission.id == submission_id
            )
        ).one()
        if row.status == SubmissionStatus.QUEUED:
            ahead = session.scalar(
                select(func.count())
                .select_from(Submission)
                .where(
                    Submission.status == SubmissionStatus.QUEUED,
                    Submission.queued_at < row.queued_at,
                )
            )
            return Progress(row.status, position=(ahead or 0) + 1)
        if row.status == SubmissionStatus.RUNNING and row.started_at is not None:
            elapsed = max(0, int((utc_now() - row.started_at).total_seconds()))
            return Progress(row.status, elapsed_seconds=elapsed)
        return Progress(row.status)


def progress_stream_response(
    request: Request, submission_id: str, read_done: ReadDone
) -> StreamingResponse:
    """The progress stream of a submission the caller may see, `done` read by `read_done`."""
    streams: ProgressStreams = request.app.state.progress_streams
    client = client_address(request)
    streams.check_room(client, submission_id)
    return StreamingResponse(
        streams.stream(request.app.state.sessions, submission_id, client, read_done),
        media_type="text/event-stream",
        # No proxy may buffer it (nginx's X-Accel-Buffering) or keep it (no-store).
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


class StreamClosingServer(uvicorn.Server):
    """uvicorn's server, ending the app's progress streams before it waits for its open
    connections to close: a stream would otherwise hold shutdown for its whole lifetime."""

    async def shutdown(self, sockets: Any = None) -> None:
        streams: ProgressStreams | None = getattr(
            getattr(self.config.app, "state", None), "progress_streams", None
        )
        if streams is not None:
            streams.close_all()
        await super().shutdown(sockets)
