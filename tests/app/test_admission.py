"""A burst of independent clients, and slow ones, against a real `loopgrade serve` on real
sockets: every request answered (202, or 503 with Retry-After), nothing accepted lost, nothing
refused stored, and the server still serving others (app/admission.py).

One server, shared by the module's tests, on the tests' database. Its lanes and queue are small
(SERVER_LIMITS), so that a burst of 1,000 is refused mostly and grades a few dozen: the tests
stay lean while every bound is crossed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from starlette.types import ASGIApp

import app.health as app_health
from app.admission import OPERATIONS_IN_FLIGHT, WAITING_PER_SLOT, AdmissionControl, Lane
from app.db import create_db_engine
from app.main import create_app
from app.models import Submission
from app.retry_after import UNKNOWN_RATE_RETRY_AFTER_SECONDS
from app.settings import Settings
from tests.app.conftest import CORRECT_CODE, EXERCISE, loopgrade
from tests.conftest import ScopeDatabase
from tests.servers import (
    HTTP_TIMEOUT_SECONDS,
    RawAnswer,
    app_in_thread,
    parse_answer,
    raw_request,
    request_on_own_connection,
    running_server,
    wait_until_ready,
)

BURST_CLIENTS = 1000
IDLE_CONNECTIONS = 1000
SLOW_BODY_CLIENTS = 20
SERVER_LIMITS = {
    "LOOPGRADE_MAX_WRITES_IN_FLIGHT": "4",
    "LOOPGRADE_MAX_WAITING_SUBMISSIONS": "40",
    "LOOPGRADE_REQUEST_BODY_TIMEOUT_SECONDS": "3",
    "LOOPGRADE_SUBMISSION_RATE_LIMIT": "0",
}
# How long a test waits for an answer before calling it a hang (not a timing assertion: a
# loaded machine answers later, a stalled server never does).
ANSWER_BOUND_SECONDS = 120
GRADED_BOUND_SECONDS = 600


@dataclass
class Server:
    url: str
    port: int
    headers: dict[str, str]
    database_url: str
    log_path: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=HTTP_TIMEOUT_SECONDS)

    def submissions_of(self, learners: list[str]) -> int:
        """How many submissions the database holds for these learners."""
        engine = create_db_engine(self.database_url)
        try:
            with engine.connect() as connection:
                count = connection.scalar(
                    select(func.count())
                    .select_from(Submission)
                    .where(Submission.learner.in_(learners))
                )
        finally:
            engine.dispose()
        return int(count or 0)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, scope_database: ScopeDatabase
) -> Iterator[Server]:
    """`loopgrade serve` on the tests' database: SQLite, or PostgreSQL in that mode (CI runs
    this module in both)."""
    data_dir = tmp_path_factory.mktemp("admission")
    log_path = data_dir / "server.log"
    with scope_database(data_dir) as database_url:
        yield from _serve(data_dir, log_path, database_url)


def _serve(data_dir: Path, log_path: Path, database_url: str) -> Iterator[Server]:
    env = {**os.environ, **SERVER_LIMITS, "LOOPGRADE_DATABASE_URL": database_url}
    created = loopgrade("keys", "create", "burst", data_dir=data_dir, env=env)
    assert created.returncode == 0, created.stderr
    headers = {"Authorization": f"Bearer {created.stdout.splitlines()[-1]}"}
    with running_server(data_dir, log_path, env) as (_, url):
        wait_until_ready(url, ANSWER_BOUND_SECONDS)  # as a load balancer sends traffic
        yield Server(url, int(url.rsplit(":", 1)[1]), headers, database_url, log_path)


def _submission(server: Server, learner: str) -> bytes:
    body = json.dumps({"exercise": EXERCISE, "learner": learner, "code": CORRECT_CODE}).encode()
    headers = {
        **server.headers,
        "Content-Type": "application/json",
        "Idempotency-Key": learner,
        "Connection": "close",
    }
    return raw_request("POST", "/api/v1/submissions", headers, body)


async def _post_on_own_connection(server: Server, learner: str) -> RawAnswer:
    return await request_on_own_connection(server.port, _submission(server, learner))


def _burst(server: Server, learners: list[str]) -> list[RawAnswer]:
    async def all_at_once() -> list[RawAnswer]:
        async with asyncio.timeout(ANSWER_BOUND_SECONDS):
            return await asyncio.gather(
                *(_post_on_own_connection(server, learner) for learner in learners)
            )

    return asyncio.run(all_at_once())


def _wait_graded(client: httpx.Client, locations: list[str]) -> None:
    deadline = time.monotonic() + GRADED_BOUND_SECONDS
    for location in locations:
        while (body := client.get(location).json())["status"] not in ("graded", "error"):
            assert time.monotonic() < deadline, f"{location} still {body['status']}"
            time.sleep(0.2)
        assert (body["status"], body["diagnosis"]) == ("graded", "correct"), body


def test_a_burst_of_independent_clients_is_all_answered_and_every_202_graded(
    server: Server,
) -> None:
    learners = [f"burst-{number}" for number in range(BURST_CLIENTS)]
    answers = _burst(server, learners)

    assert {answer.status for answer in answers} <= {202, 503}, {a.status for a in answers}
    accepted = [a for a in answers if a.status == 202]
    refused = [learner for learner, a in zip(learners, answers, strict=True) if a.status == 503]
    assert accepted, "the burst got no 202 at all"
    assert refused, "the burst crossed no bound (the test's limits are too large)"
    for answer in answers:
        if answer.status == 503:
            assert int(answer.headers["retry-after"]) > 0
            assert answer.json()["detail"], "a 503 without a sentence"
    # Nothing refused was stored.
    assert server.submissions_of(refused) == 0

    with server.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        _wait_graded(client, [a.headers["location"] for a in accepted])


def test_a_client_told_503_retries_with_its_key_and_gets_one_submission(server: Server) -> None:
    learners = [f"retry-{number}" for number in range(300)]
    answers = _burst(server, learners)
    refused = [learner for learner, a in zip(learners, answers, strict=True) if a.status == 503]
    assert refused, "the burst crossed no bound (the test's limits are too large)"
    retried = refused[:5]

    async def retry_until_accepted(learner: str) -> RawAnswer:
        while (answer := await _post_on_own_connection(server, learner)).status == 503:
            await asyncio.sleep(int(answer.headers["retry-after"]))
        return answer

    async def retry_all() -> list[RawAnswer]:
        async with asyncio.timeout(GRADED_BOUND_SECONDS):
            return await asyncio.gather(*(retry_until_accepted(learner) for learner in retried))

    first = asyncio.run(retry_all())
    assert [answer.status for answer in first] == [202] * len(retried)
    again = asyncio.run(retry_all())
    assert [a.json()["id"] for a in again] == [a.json()["id"] for a in first]
    assert all(answer.headers["idempotent-replayed"] == "true" for answer in again)
    assert server.submissions_of(retried) == len(retried)
    with server.client() as client:
        _wait_graded(client, [a.headers["location"] for a in first])
        accepted = [a.headers["location"] for a in answers if a.status == 202]
        _wait_graded(client, accepted)


def test_slow_bodies_and_idle_connections_do_not_take_the_server(server: Server) -> None:
    """Bodies trickling in (more of them than write slots), and a thousand connections idle
    after a request or halfway through their headers: others are still served, and the slow
    bodies are answered 408 long before they would have finished."""
    body = json.dumps({"exercise": EXERCISE, "learner": "slow", "code": CORRECT_CODE}).encode()
    slow_head = raw_request(
        "POST",
        "/api/v1/submissions",
        {**server.headers, "Content-Type": "application/json", "Connection": "close"},
        body,
    )[: -len(body)]

    async def slow_body() -> RawAnswer:
        loop = asyncio.get_running_loop()
        connection = socket.socket()
        connection.setblocking(False)
        answered = asyncio.Event()

        async def trickle() -> None:
            # A byte a second: the whole body would take hours; the server stops it first.
            with contextlib.suppress(ConnectionError):
                for byte in body[:30]:
                    if answered.is_set():
                        return
                    await loop.sock_sendall(connection, bytes([byte]))
                    await asyncio.sleep(1)

        trickling: asyncio.Task[None] | None = None
        received = bytearray()
        try:
            await loop.sock_connect(connection, ("127.0.0.1", server.port))
            await loop.sock_sendall(connection, slow_head)
            trickling = asyncio.create_task(trickle())
            try:
                while chunk := await loop.sock_recv(connection, 65536):
                    received += chunk
                    answered.set()
            except ConnectionResetError:
                # A byte the trickle sent after the server closed (a loaded client sees the
                # answer late) is met with a reset; the kernel still hands over what arrived
                # before it, which a StreamReader would drop for the error.
                if not received:
                    raise
            return parse_answer(bytes(received))
        finally:
            if trickling is not None:
                trickling.cancel()
            connection.close()

    async def idle(send: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(send)
        await writer.drain()
        return reader, writer

    async def scenario() -> tuple[list[RawAnswer], int, int]:
        healthz = raw_request("GET", "/healthz", {})
        half_headers = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        idle_connections = await asyncio.gather(
            *(idle(healthz if n % 2 else half_headers) for n in range(IDLE_CONNECTIONS))
        )
        slow = [asyncio.create_task(slow_body()) for _ in range(SLOW_BODY_CLIENTS)]
        try:
            async with httpx.AsyncClient(
                base_url=server.url, headers=server.headers, timeout=HTTP_TIMEOUT_SECONDS
            ) as client:
                submitted = await client.post(
                    "/api/v1/submissions",
                    json={"exercise": EXERCISE, "learner": "bystander", "code": CORRECT_CODE},
                )
                page = await client.get("/api/v1/exercises")
            async with asyncio.timeout(ANSWER_BOUND_SECONDS):
                return await asyncio.gather(*slow), submitted.status_code, page.status_code
        finally:
            for _, writer in idle_connections:
                writer.close()

    slow_answers, submitted_status, page_status = asyncio.run(scenario())
    assert (submitted_status, page_status) == (202, 200)
    assert [answer.status for answer in slow_answers] == [408] * SLOW_BODY_CLIENTS
    assert "did not arrive within" in slow_answers[0].json()["detail"]


def test_over_capacity_writes_get_503_at_once_while_reads_and_probes_answer(
    settings: Settings, api_key: str
) -> None:
    """The test makes the overlap: a route of its own holds the one write slot until told."""
    app = create_app(
        settings.model_copy(update={"max_writes_in_flight": 1, "admission_wait_seconds": 0})
    )
    entered, release = threading.Event(), threading.Event()

    @app.post("/api/v1/test-hold")
    async def hold() -> dict[str, str]:
        entered.set()
        while not release.is_set():
            await asyncio.sleep(0.01)
        return {"held": "done"}

    auth = {"Authorization": f"Bearer {api_key}"}
    with (
        app_in_thread(app) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        with ThreadPoolExecutor(1) as holder:
            held = holder.submit(client.post, "/api/v1/test-hold")
            assert entered.wait(ANSWER_BOUND_SECONDS)
            try:
                refused = client.post(
                    "/api/v1/submissions",
                    headers=auth,
                    json={"exercise": EXERCISE, "learner": "refused", "code": CORRECT_CODE},
                )
                page = client.post("/sign-in", data={"email": "a@example.org", "password": "x"})
                probes = (
                    client.get("/healthz"),
                    client.get("/readyz"),
                    client.get("/api/v1/exercises"),
                )
            finally:
                release.set()
            assert held.result().json() == {"held": "done"}

        # Nothing left the write lane lately: its drain rate is unknown, back within seconds.
        assert refused.status_code == 503
        assert 1 <= int(refused.headers["retry-after"]) <= UNKNOWN_RATE_RETRY_AFTER_SECONDS
        assert "nothing was stored" in refused.json()["detail"]
        assert page.status_code == 503
        assert page.headers["content-type"].startswith("text/html")
        assert "nothing was stored" in page.text
        assert [probe.status_code for probe in probes[::2]] == [200, 200]
        assert probes[1].status_code in (200, 503)  # ready, or still computing trajectories
        assert "queue" in probes[1].json()["checks"]
        # The slot is free again.
        accepted = client.post(
            "/api/v1/submissions",
            headers=auth,
            json={"exercise": EXERCISE, "learner": "after", "code": CORRECT_CODE},
        )
        assert accepted.status_code == 202, accepted.text


def _admission_of(app: ASGIApp) -> AdmissionControl:
    """The app's admission control, found down its middleware stack."""
    layer: object = app
    while not isinstance(layer, AdmissionControl):
        layer = layer.middleware_stack if isinstance(layer, FastAPI) else layer.app  # type: ignore[attr-defined]
    return layer


def test_probes_are_answered_with_their_lane_full(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test fills the operations lane itself: /metrics calls held inside until it lets each
    go, every slot taken and the line full. /healthz is answered all the same (no slot, thread
    or database); /readyz waits ahead of the line and is answered at the next slot freed."""
    app = create_app(settings.model_copy(update={"admission_wait_seconds": ANSWER_BOUND_SECONDS}))
    capacity = OPERATIONS_IN_FLIGHT
    line = capacity * WAITING_PER_SLOT
    held, entered = threading.Semaphore(0), threading.Semaphore(0)
    count_from_database = app_health._count_from_database

    def held_count(sessions: object) -> None:
        entered.release()
        assert held.acquire(timeout=ANSWER_BOUND_SECONDS)
        count_from_database(sessions)  # type: ignore[arg-type]

    monkeypatch.setattr(app_health, "_count_from_database", held_count)

    async def scenario(url: str) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with (
            asyncio.timeout(ANSWER_BOUND_SECONDS),
            httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT_SECONDS, limits=limits) as client,
        ):
            metrics = [
                asyncio.create_task(client.get("/metrics")) for _ in range(capacity + line + 4)
            ]
            while sum(task.done() for task in metrics) < 4:  # the 4 beyond the line: refused
                await asyncio.sleep(0.01)
            for _ in range(capacity):
                await asyncio.to_thread(entered.acquire)
            refused = {task for task in metrics if task.done()}
            assert [task.result().status_code for task in refused] == [503] * 4
            for answer in (task.result() for task in refused):
                assert 1 <= int(answer.headers["retry-after"]) <= UNKNOWN_RATE_RETRY_AFTER_SECONDS

            alive = await client.get("/healthz")
            assert (alive.status_code, alive.json()) == (200, {"status": "ok"})

            ready = asyncio.create_task(client.get("/readyz"))
            operations = _admission_of(app)._lane(Lane.OPERATIONS)
            while not operations._first:  # /readyz is in the line, ahead of the 32
                await asyncio.sleep(0.01)
            held.release()  # one /metrics call ends: its slot goes to /readyz
            answer = await ready
            assert "checks" in answer.json(), answer.text  # readiness, not "busy"
            answered = [task for task in metrics if task.done() and task not in refused]
            assert len(answered) == 1, "a /metrics call in the line went before /readyz"

            for _ in metrics:
                held.release()
            finished = await asyncio.gather(*metrics)
            assert sorted(m.status_code for m in finished) == [200] * (capacity + line) + [503] * 4

    with app_in_thread(app) as url:
        asyncio.run(scenario(url))
