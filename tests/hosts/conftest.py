"""Many hosts on one machine: real PostgreSQL, real Redis, `loopgrade worker` processes.

Each test gets a database of its own on the session's PostgreSQL and a Redis of its own (a
test may kill it). Workers are real processes in their own process groups, so a test can
kill -9 one with its sandboxes; their leases and sweeps are short so that a dead worker's
submission comes back within seconds, not the production half minute.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import httpx
import pytest

from app.api_keys import create_api_key
from app.db import SessionFactory, create_db_engine, create_session_factory, upgrade_database
from app.main import create_app
from app.settings import Settings
from tests.servers import HTTP_TIMEOUT_SECONDS, REPO, app_in_thread
from tests.services import RedisServer, create_database, drop_database, redis_server

# Short enough that a killed worker's submission is graded again within seconds.
HOST_TEST_ENV = {
    "LOOPGRADE_LEASE_SECONDS": "3",
    "LOOPGRADE_SWEEP_INTERVAL_SECONDS": "1",
    "LOOPGRADE_REDELIVER_AFTER_SECONDS": "5",
    "LOOPGRADE_SUBMISSION_RATE_LIMIT": "0",
    # Generous caps: these tests are about the queue, on a machine that may be busy.
    "LOOPGRADE_GRADING_WALL_TIMEOUT_SECONDS": "120",
    "LOOPGRADE_GRADING_CPU_SECONDS": "60",
    # A warm pool of one slot (two worker threads to it): a worker here grades a few
    # submissions, none of these tests needs two graded at once on one worker, and a slot's
    # zygote imports torch (seconds of CPU) whether it grades or not.
    "LOOPGRADE_SANDBOX_POOL_SIZE": "1",
}


@pytest.fixture
def database_url(postgres_admin_url: str) -> Iterator[str]:
    """A migrated PostgreSQL database of this test's own."""
    name = f"loopgrade_hosts_{uuid.uuid4().hex[:12]}"
    url = create_database(postgres_admin_url, name)
    upgrade_database(url)
    yield url
    drop_database(postgres_admin_url, name)


@pytest.fixture
def own_redis(redis_available: None, tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own, which it may kill."""
    with redis_server(tmp_path) as server:
        yield server


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> str:
    """The broker: LOOPGRADE_TEST_REDIS_URL (.ci/run starts one), else a Redis of our own."""
    shared = os.environ.get("LOOPGRADE_TEST_REDIS_URL")
    if shared:
        return shared
    own: RedisServer = request.getfixturevalue("own_redis")
    return own.url


@pytest.fixture
def host_env(database_url: str, redis_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment every host of the test shares: one database, one broker queue."""
    return {
        **HOST_TEST_ENV,
        "LOOPGRADE_DATA_DIR": str(tmp_path / "data"),
        "LOOPGRADE_DATABASE_URL": database_url,
        "LOOPGRADE_BROKER_URL": redis_url,
        # A queue of this test's own: tests sharing one Redis never see each other's messages.
        "LOOPGRADE_WORKER_QUEUE": f"grading-{uuid.uuid4().hex[:12]}",
    }


@pytest.fixture
def host_settings(host_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name, value in host_env.items():
        monkeypatch.setenv(name, value)
    return Settings()


@pytest.fixture
def sessions(host_settings: Settings) -> Iterator[SessionFactory]:
    engine = create_db_engine(host_settings.database_url)
    yield create_session_factory(engine)
    engine.dispose()


@pytest.fixture
def auth(sessions: SessionFactory) -> dict[str, str]:
    with sessions.begin() as session:
        _, secret = create_api_key(session, name="hosts")
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def api(host_settings: Settings) -> Iterator[httpx.Client]:
    """The API host: it sends submissions to the broker and grades nothing itself."""
    with (
        app_in_thread(create_app(host_settings)) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        yield client


class Worker:
    """One `loopgrade worker` process (its own process group) and its log."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "worker"],
                cwd=REPO,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        """kill -9 the worker and everything it started (its sandboxes): a host lost."""
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=60)
        self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def start_worker(host_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start `loopgrade worker` processes; all are stopped at the end of the test."""
    workers: list[Worker] = []

    def start(**env: str) -> Worker:
        worker = Worker({**host_env, **env}, tmp_path / f"worker-{len(workers)}.log")
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()
