"""Admission control: a bounded number of requests in flight, and a fast 503 beyond it.

Each request joins one lane (`Lane`): writes, reads, or the operator's probes. A lane admits
`capacity` requests at once; up to `WAITING_PER_SLOT` more per slot wait at most
`admission_wait_seconds` for a slot, holding nothing but their socket; the rest are answered
at once with 503, a sentence and `Retry-After` from the lane's line and its measured drain rate
(app/retry_after.py). Reads and probes have lanes of their own, so a result page and /readyz
answer while submissions are refused; /readyz goes first in its lane's line.

/healthz is answered here, before any lane: it needs no slot, no thread and no database, so a
load balancer's liveness probe is never refused beside a crowd of clients.

A request's body is read whole before it asks for a slot (within `request_body_timeout_seconds`,
else 408): a client sending its body slowly holds only its own socket, never a slot.

A submission to a full grading queue is refused here too, before a lane, a database session or
a sign-in, with the intake's sentence and `Retry-After` (app/grading/submissions.py): when the
process's `WaitingGauge` (app/grading/queue_gauge.py) knows the queue is full, which it says
only while that is sure; otherwise the intake's exact count decides. Only submissions answered
in JSON (the API, the exercise page's script) are refused here: a plain form's post gets its
page back with the learner's code in it from the intake. A submission with an Idempotency-Key
goes to the intake, which answers a resend of an accepted one with its submission, unless the
intake of this very process refused that key from that sender for a full queue and nothing
accepted the key since (`RefusedKeys`: embedded only; with a broker, several web processes may
accept, and every keyed submission goes to the intake).

The slot is given back once the response starts, after `RequestTransaction` committed: a
progress stream or a slow reader of a response holds no slot, no thread and no connection.

`RequestCapacity` derives the anyio thread limiter and the request engine's pool from the
lanes (docs/operations.md): every admitted request finds a thread and a connection at once,
so none holds a connection while it waits for a thread, nor a thread while it waits for a
connection.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.grading.queue_gauge import (
    REFUSED_BY_FULL_QUEUE,
    KeyedSubmission,
    RefusedKeys,
    WaitingGauge,
    credential_of,
)
from app.grading.submissions import QueueFull, queue_full
from app.integrations.framing import FRAME_ANCESTORS_RELOADS
from app.retry_after import DrainMeter, ReturnSchedule
from app.settings import Settings

# Requests that may wait for a slot, per slot of the lane; beyond them a 503 comes at once.
WAITING_PER_SLOT = 8
# The operator's probes (/readyz, /metrics) in flight at once.
OPERATIONS_IN_FLIGHT = 4
OPERATIONS_PATHS = frozenset({"/readyz", "/metrics"})
LIVENESS_PATH = "/healthz"
# Answered before anything else waiting in the operations lane.
READINESS_PATH = "/readyz"
# uvicorn's own bounds, before a request reaches the app. Beyond MAX_OPEN_CONNECTIONS
# connections and requests uvicorn itself answers 503: the last guard of memory and file
# descriptors. An idle keep-alive connection is closed after KEEP_ALIVE_SECONDS. (uvicorn has no
# timer for a connection that never finishes its first request's headers: a proxy in front
# bounds those, docs/operations.md.)
MAX_OPEN_CONNECTIONS = 4096
LISTEN_BACKLOG = 2048
KEEP_ALIVE_SECONDS = 5
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

# Threads the progress streams' database reads may take at once (app/progress.py): a slow
# database then holds these, not the threads every other request needs (anyio's default pool
# of 40). Counted here, as each takes a connection of the pool.
STREAM_READ_THREADS = 4


class Lane(enum.StrEnum):
    """What a request is, as admission counts it."""

    WRITE = "write"  # submissions, forms, anything that changes state
    READ = "read"  # pages, results, the API's reads, static files
    OPERATIONS = "operations"  # /readyz, /metrics


def lane_of(scope: Scope) -> Lane:
    if scope["path"] in OPERATIONS_PATHS:
        return Lane.OPERATIONS
    return Lane.READ if scope["method"] in READ_METHODS else Lane.WRITE


@dataclass(frozen=True)
class RequestCapacity:
    """How many requests of each lane run at once, and the threads and connections that takes."""

    write: int
    read: int
    operations: int = OPERATIONS_IN_FLIGHT

    @classmethod
    def from_settings(cls, settings: Settings) -> RequestCapacity:
        return cls(write=settings.max_writes_in_flight, read=settings.max_reads_in_flight)

    def of(self, lane: Lane) -> int:
        return {Lane.WRITE: self.write, Lane.READ: self.read, Lane.OPERATIONS: self.operations}[
            lane
        ]

    @property
    def threads(self) -> int:
        """anyio's default thread limiter: one thread for each admitted request (a request
        runs one hop at a time). Progress streams read on a limiter of their own."""
        return self.write + self.read + self.operations

    @property
    def connections(self) -> int:
        """The request engine's pool: one connection per admitted request, one per thread of
        the progress streams' reads, and one for the LTI frame-ancestors reload (which runs
        on a thread of its own as a response starts). No overflow: more would only wait."""
        return self.threads + STREAM_READ_THREADS + FRAME_ANCESTORS_RELOADS


class AdmissionLane:
    """`capacity` slots and a bounded line of requests waiting for one. A request that goes
    `first` (/readyz) waits ahead of the others, in a line of its own of the same bound."""

    def __init__(self, capacity: int, wait_seconds: float) -> None:
        self._free = capacity
        self._max_waiting = capacity * WAITING_PER_SLOT
        self._first: deque[asyncio.Future[None]] = deque()
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._wait_seconds = wait_seconds
        self._drained = DrainMeter()
        self._returns = ReturnSchedule()

    async def acquire(self, *, first: bool = False) -> bool:
        """A slot (True), or False at once when the line is full or after the wait."""
        if self._free > 0:
            self._free -= 1
            return True
        line = self._first if first else self._waiting
        if len(line) >= self._max_waiting:
            return False
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.append(handed)
        try:
            async with asyncio.timeout(self._wait_seconds):
                await handed
        except TimeoutError:
            pass
        except BaseException:  # the client went away: a slot handed over meanwhile goes on
            if handed.done() and not handed.cancelled():
                self.release()
            raise
        finally:
            if handed in line:
                line.remove(handed)
        # A slot handed over as the wait ran out is this request's all the same.
        return handed.done() and not handed.cancelled()

    def release(self) -> None:
        """Give the slot to the first still waiting (/readyz first), else back to the lane.

        Only a slot handed to one waiting counts as drained: the lane's rate is its rate while
        busy. A rate read over the requests of a quiet spell (a few a second, as few as came)
        would send a crowd away for minutes while the lane stood idle."""
        for line in (self._first, self._waiting):
            while line:
                handed = line.popleft()
                if not handed.done():
                    self._drained.record()
                    handed.set_result(None)
                    return
        self._free += 1

    def retry_after_seconds(self) -> int:
        """When a request refused now should come back: once the line before it has drained."""
        ahead = len(self._first) + len(self._waiting) - self._max_waiting + 1
        return self._returns.retry_after_seconds(ahead=ahead, per_second=self._drained.per_second())


ErrorResponder = Callable[..., Response]
# Whether a request is a submission (a POST to one of the routes that take one in).
SubmissionMatcher = Callable[[Scope], bool]


def answers_in_json(scope: Scope) -> bool:
    """The API, and the exercise page's script (which asks for JSON); not a plain form's post."""
    accept = Headers(scope=scope).get("accept", "")
    return scope["path"].startswith("/api/") or "application/json" in accept


class AdmissionControl:
    """The ASGI middleware in front of every route (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        settings: Settings,
        error_response: ErrorResponder,
        gauge: WaitingGauge | None = None,
        is_submission: SubmissionMatcher | None = None,
    ) -> None:
        self.app = app
        self._settings = settings
        self._gauge = gauge
        self._is_submission = is_submission
        # Embedded, this process is the only one that accepts a submission (app/grading/queue.py).
        self._refused_keys = None if settings.broker_url else RefusedKeys()
        self._capacity = RequestCapacity.from_settings(settings)
        self._wait_seconds = settings.admission_wait_seconds
        self._body_timeout_seconds = settings.request_body_timeout_seconds
        self._error_response = error_response
        self._lanes: dict[Lane, AdmissionLane] | None = None  # made in the event loop

    def _lane(self, lane: Lane) -> AdmissionLane:
        if self._lanes is None:
            self._lanes = {
                each: AdmissionLane(self._capacity.of(each), self._wait_seconds) for each in Lane
            }
        return self._lanes[lane]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == LIVENESS_PATH and scope["method"] in ("GET", "HEAD"):
            await _answer_alive(send, with_body=scope["method"] == "GET")
            return
        lane = lane_of(scope)
        if lane is Lane.WRITE:
            try:
                receive = await self._read_body(receive)
            except TimeoutError:
                response = self._error_response(
                    Request(scope),
                    408,
                    "Too slow",
                    f"the request body did not arrive within {self._body_timeout_seconds:g} "
                    "seconds; send it again",
                )
                await response(scope, receive, send)
                return
            except HTTPException as exc:  # the body limit (RequestBodyLimit) refused it
                response = self._error_response(
                    Request(scope), exc.status_code, "Too large", exc.detail
                )
                await response(scope, receive, send)
                return
        keyed: KeyedSubmission | None = None
        if lane is Lane.WRITE and self._is_submission is not None and self._is_submission(scope):
            headers = Headers(scope=scope)
            key = headers.get("idempotency-key")
            credential = credential_of(headers.get("authorization"), headers.get("cookie"))
            refusal = self._full_queue_refusal(scope, credential, key)
            if refusal is not None:
                response = JSONResponse(
                    {"detail": refusal.message}, status_code=503, headers=refusal.headers
                )
                await response(scope, receive, send)
                return
            if key is not None and self._refused_keys is not None:
                keyed = self._refused_keys.began(credential, key)
        admission = self._lane(lane)
        if not await admission.acquire(first=scope["path"] == READINESS_PATH):
            await self._busy(lane, admission.retry_after_seconds(), scope, receive, send)
            if keyed is not None:
                self._keyed_ended(keyed, scope, None)
            return
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                admission.release()

        async def send_releasing(message: Message) -> None:
            # The transaction is committed by now (RequestTransaction is inside): the rest of
            # the response needs neither a thread nor a connection.
            if message["type"] == "http.response.start":
                release()
                if keyed is not None:
                    self._keyed_ended(keyed, scope, message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_releasing)
        finally:
            release()
            if keyed is not None:
                self._keyed_ended(keyed, scope, None)

    def _full_queue_refusal(
        self, scope: Scope, credential: str, key: str | None
    ) -> QueueFull | None:
        """The intake's refusal, made here when the gauge is sure the queue is full and the
        intake could not answer otherwise (see the module docstring); else None."""
        max_waiting = self._settings.max_waiting_submissions
        if self._gauge is None or not max_waiting or not answers_in_json(scope):
            return None
        if key is not None and (
            self._refused_keys is None or not self._refused_keys.refused_before(credential, key)
        ):
            return None
        waiting = self._gauge.waiting_at_least()
        if waiting is None or waiting < max_waiting:
            return None
        return queue_full(
            waiting - max_waiting + 1, waiting, self._gauge.drained_per_second(), at_least=True
        )

    def _keyed_ended(self, keyed: KeyedSubmission, scope: Scope, status: int | None) -> None:
        assert self._refused_keys is not None
        session = scope.get("state", {}).get("db_session")
        full_queue = session is not None and bool(session.info.get(REFUSED_BY_FULL_QUEUE))
        self._refused_keys.ended(keyed, status=status, full_queue=full_queue)

    async def _read_body(self, receive: Receive) -> Receive:
        """The whole body, read within the deadline; a `receive` that replays it."""
        messages: list[Message] = []
        async with asyncio.timeout(self._body_timeout_seconds):
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request" or not message.get("more_body", False):
                    break

        async def replay() -> Message:
            if messages:
                return messages.pop(0)
            return await receive()

        return replay

    async def _busy(
        self, lane: Lane, retry_after_seconds: int, scope: Scope, receive: Receive, send: Send
    ) -> None:
        what = "submissions and changes" if lane is Lane.WRITE else "requests"
        response = self._error_response(
            Request(scope),
            503,
            "Busy, try again shortly",
            f"The server is taking too many {what} at once right now; nothing was stored. "
            f"Send it again in {retry_after_seconds} seconds (an API client with the same "
            "Idempotency-Key).",
            {"Retry-After": str(retry_after_seconds)},
        )
        await response(scope, receive, send)


ALIVE_BODY = json.dumps({"status": "ok"}).encode()


async def _answer_alive(send: Send, *, with_body: bool) -> None:
    """/healthz: the process answers (whether it can work is /readyz, app/health.py)."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(ALIVE_BODY)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": ALIVE_BODY if with_body else b""})


def uvicorn_config(app: ASGIApp, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for the app, with the bounds above (`loopgrade serve`, tests).

    Proxy headers are the app's to believe or not (LOOPGRADE_TRUSTED_PROXIES), not uvicorn's.
    """
    return uvicorn.Config(
        app,
        proxy_headers=False,
        limit_concurrency=MAX_OPEN_CONNECTIONS,
        backlog=LISTEN_BACKLOG,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        **options,
    )
