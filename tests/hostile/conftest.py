"""A real grading service per sandbox backend, for the hostile submissions to be sent to.

Each backend gets one `loopgrade serve` process on 127.0.0.1 with a fresh data directory and a
database of its own (`scope_database`: on PostgreSQL too, in LOOPGRADE_TEST_DATABASE_URL mode),
short grading limits (LOOPGRADE_GRADING_*), an API key from `loopgrade keys create`, and two
secrets planted where learner code must never reach: one in the server's environment, one in a
file in its data directory. A backend this host does not have is skipped with the reason.

LOOPGRADE_TEST_HOSTILE_BACKENDS=bwrap-pool (comma-separated names of BACKENDS) runs the suite on
those backends only; unset, on all of them: the whole suite on bwrap-pool, the production path,
and the FOCUSED tests on the others. .ci/run runs bwrap-pool on both databases and each other
backend on one: what a server stores is the same whichever sandbox ran the code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

import sandbox
from app.db import create_db_engine
from app.models import Submission
from sandbox import backends as sandbox_backends
from tests.conftest import ScopeDatabase
from tests.servers import HTTP_TIMEOUT_SECONDS, running_server

REPO = Path(__file__).resolve().parents[2]
EXERCISE = "train-step"
CORRECT_CODE = (REPO / "exercises" / EXERCISE / "solution.py").read_text()
# A known bug (gradients pile up: no zero_grad), which honestly earns part of the points.
HONEST_BUG_CODE = (REPO / "exercises" / EXERCISE / "bugs" / "no_zero_grad.py").read_text()
# bwrap-pool: the bwrap backend with a warm pool in front, which grades the harness;
# docker-pool: the same pool, its slots in containers of the docker backend.
BACKENDS = tuple(
    name for backend in sandbox_backends.BACKENDS for name in (backend, f"{backend}-pool")
)
# The tests of what a backend's outer layer holds: its cgroups, files, network and processes.
OUTER_LAYER = {
    "test_fork_bomb",
    "test_memory_bomb_of_a_huge_tensor",
    "test_disk_fill_of_every_writable_place",
    "test_killing_the_parent_pid_1_and_the_process_group",
    "test_connecting_to_a_tcp_listener_on_the_host",
    "test_reading_the_servers_secrets",
    "test_a_file_planted_by_one_submission_is_invisible_to_the_next",
    "test_writing_to_host_paths",
    "test_two_submissions_at_once_cannot_see_or_signal_each_other",
}
# bwrap-pool, the production path, runs the whole suite. The others run the tests of their own
# outer layer: everything a grade does beyond it (the supervisor's caps, the grader's reading of
# the result, the learner's messages) is the same code for every backend. docker-pool's jobs are
# isolated by the same zygote as bwrap-pool's. A cold run also has its own start-up (not counted
# against the learner's CPU) and its own result channel; tests/sandbox holds each cold backend
# to every cap and isolation rule directly, without a server.
COLD_RUN = {
    "test_infinite_loop",
    "test_a_forged_trace_on_the_result_channel",
    # The harness's frames and objects as a cold run leaves them to the learner's code.
    "test_forging_a_second_unit_check",
}
FOCUSED = {
    "bwrap": OUTER_LAYER | COLD_RUN,
    "docker": OUTER_LAYER | COLD_RUN,
    "docker-pool": OUTER_LAYER,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out of a focused backend's run the tests of this suite it does not need."""

    def left_out(item: pytest.Item) -> bool:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("service") if callspec else None
        return (
            isinstance(item, pytest.Function)
            and item.path.parent == Path(__file__).parent
            and backend in FOCUSED
            and item.originalname not in FOCUSED[backend]
        )

    deselected = [item for item in items if left_out(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not left_out(item)]


def chosen_backends() -> tuple[str, ...]:
    """The backends of LOOPGRADE_TEST_HOSTILE_BACKENDS, or all of them when it is unset."""
    given = os.environ.get("LOOPGRADE_TEST_HOSTILE_BACKENDS", "")
    chosen = tuple(name.strip() for name in given.split(",") if name.strip())
    unknown = [name for name in chosen if name not in BACKENDS]
    if unknown:
        raise pytest.UsageError(
            f"LOOPGRADE_TEST_HOSTILE_BACKENDS names {', '.join(unknown)}; "
            f"the backends are {', '.join(BACKENDS)}"
        )
    return chosen or BACKENDS


# A slot per run the suite's 2 workers can have at once (a grade is one run): the test of two
# overlapping submissions needs both running together.
POOL_SIZE = 2

# Short limits, so that the whole suite takes minutes. CPU is what a submission is held to (its
# start-up apart: import torch, the first optimizer, about 3 s per cold run); the wall clock is
# the backstop for code that waits, well above what two runs sharing the 2 cores need: cold,
# with their start-ups; warm, a run starts in milliseconds, so its backstop can be nearer (code
# that sleeps waits it out, in both passes of CI).
COLD_WALL_TIMEOUT_SECONDS = 90.0
POOL_WALL_TIMEOUT_SECONDS = 30.0
CPU_SECONDS = 6.0
# Grading around the sandbox runs: queueing, the trusted reference runs, the database, polling.
MARGIN_SECONDS = 6.0
GRADING_TIMEOUT_SECONDS = 120.0
# bwrap's uids for this session's servers, apart from any other test run's on this machine
# (chosen by this process's pid): another run's processes under a shared uid would count in
# this one's RLIMIT_NPROC, and in the check that a grade leaves no process behind.
_FIRST_UID = 2_000_100_000 + (os.getpid() % 100_000) * 64
SANDBOX_UIDS = range(_FIRST_UID, _FIRST_UID + 64)


@dataclass
class Service:
    """One running server, seen from outside: its URL, key, secrets and process."""

    backend: str
    url: str
    headers: dict[str, str]
    process: subprocess.Popen[bytes]
    data_dir: Path
    database_url: str
    log_path: Path
    env_secret: str
    file_secret: str
    wall_timeout_seconds: float
    client: httpx.Client = field(init=False)
    honest_bug_score: float | None = None

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=HTTP_TIMEOUT_SECONDS)

    def submit(self, code: str, learner: str = "hostile", exercise: str = EXERCISE) -> str:
        response = self.client.post(
            "/api/v1/submissions",
            headers=self.headers,
            json={"exercise": exercise, "learner": learner, "code": code},
        )
        assert response.status_code == 202, response.text
        return str(response.headers["location"])

    def wait(self, location: str) -> dict[str, Any]:
        deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
        while True:
            response = self.client.get(location, headers=self.headers)
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            if body["status"] in ("graded", "error"):
                return body
            assert time.monotonic() < deadline, f"still {body['status']}: {self.log_tail()}"
            time.sleep(0.1)

    def grade(
        self, code: str, learner: str = "hostile", exercise: str = EXERCISE
    ) -> tuple[dict[str, Any], float]:
        """Submit, wait until graded; the submission and the seconds it took."""
        started = time.monotonic()
        body = self.wait(self.submit(code, learner, exercise))
        return body, time.monotonic() - started

    def stored_text(self, submission_id: str) -> tuple[str | None, str | None]:
        """The output and feedback stored for a submission (what its owner's page shows)."""
        engine = create_db_engine(self.database_url)
        try:
            with engine.connect() as connection:
                row = connection.execute(
                    select(Submission.output, Submission.feedback).where(
                        Submission.id == submission_id
                    )
                ).one()
        finally:
            engine.dispose()
        return row.output, row.feedback

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def assert_healthy(self) -> None:
        """The server is up, left nothing running, and grades a correct submission in full."""
        assert self.process.poll() is None, f"the server died: {self.log_tail()}"
        assert self.client.get("/api/v1/exercises").status_code == 200
        body, _ = self.grade(CORRECT_CODE, learner="bystander")
        assert body["status"] == "graded", body
        assert body["diagnosis"] == "correct", body
        assert body["score"] == body["max_score"] > 0
        assert leftover_sandboxes(self.backend, self.process.pid) == []

    def bug_score(self) -> float:
        """What the honest bug scores here (once per service)."""
        if self.honest_bug_score is None:
            body, _ = self.grade(HONEST_BUG_CODE, learner="honest")
            assert body["diagnosis"] == "missing-zero-grad", body
            assert 0 < body["score"] < body["max_score"]
            self.honest_bug_score = float(body["score"])
        return self.honest_bug_score


def leftover_sandboxes(backend: str, server_pid: int) -> list[str]:
    """The server's sandboxes still there after their grade was stored (there must be none)."""
    containers = []
    if backend.startswith("docker"):
        from sandbox import docker as docker_backend

        client = docker_backend.connect()
        try:
            # Cold runs' containers; a pool's slot containers stay between grades.
            label = [f"{docker_backend.LABEL}=run", f"{docker_backend.PID_LABEL}={server_pid}"]
            containers = client.api.containers(all=True, filters={"label": label})
        finally:
            client.close()
        if backend == "docker":
            return [str(container["Names"][0]) for container in containers]
    found = {}  # processes of the suite's sandbox uids (only a root server has them)
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            uid = int(fields["Uid"].split()[0])
        except (OSError, KeyError, ValueError):
            continue
        # A zombie is dead already (no memory, no CPU, no signals): a warm pool's zygote reaps
        # the orphans of a child killed at a cap while it waits for its next job.
        if uid in SANDBOX_UIDS and not fields["State"].strip().startswith("Z"):
            found[int(entry)] = fields
    # A warm pool's zygotes (PID 1 of their bwrap or container) and their bwraps stay between
    # grades.
    zygotes = {
        pid
        for pid, fields in found.items()
        if backend.endswith("-pool") and fields["NSpid"].split()[1:] == ["1"]
    }
    bwraps = {int(found[pid]["PPid"]) for pid in zygotes}
    return [str(container["Names"][0]) for container in containers] + [
        f"pid {pid} (uid {fields['Uid'].split()[0]})" for pid, fields in found.items()
        if pid not in zygotes | bwraps
    ]  # fmt: skip


def backend_unavailable_reason(backend: str) -> str | None:
    saved = os.environ.get("LOOPGRADE_SANDBOX")
    os.environ["LOOPGRADE_SANDBOX"] = backend.removesuffix("-pool")
    try:
        sandbox.check_available()
    except sandbox.SandboxUnavailable as error:
        return str(error)
    finally:
        if saved is None:
            del os.environ["LOOPGRADE_SANDBOX"]
        else:
            os.environ["LOOPGRADE_SANDBOX"] = saved
    return None


@pytest.fixture(scope="session", params=chosen_backends())
def service(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    scope_database: ScopeDatabase,
) -> Iterator[Service]:
    backend: str = request.param
    reason = backend_unavailable_reason(backend)
    if reason:
        pytest.skip(f"no {backend} sandbox on this host: {reason}")
    wall_timeout_seconds = (
        POOL_WALL_TIMEOUT_SECONDS if backend.endswith("-pool") else COLD_WALL_TIMEOUT_SECONDS
    )
    root = tmp_path_factory.mktemp(f"hostile-{backend}")
    data_dir = root / "data"
    data_dir.mkdir()  # for the planted secret (a server on PostgreSQL keeps no database in it)
    env_secret, file_secret = f"env-secret-{uuid.uuid4().hex}", f"file-secret-{uuid.uuid4().hex}"
    with scope_database(data_dir) as database_url:
        env = {
            **os.environ,
            # The service's own database: the environment's is the first test's (on PostgreSQL).
            "LOOPGRADE_DATABASE_URL": database_url,
            "LOOPGRADE_SANDBOX": backend.removesuffix("-pool"),
            "LOOPGRADE_SANDBOX_POOL_SIZE": str(POOL_SIZE if backend.endswith("-pool") else 0),
            "LOOPGRADE_GRADING_WALL_TIMEOUT_SECONDS": str(wall_timeout_seconds),
            "LOOPGRADE_GRADING_CPU_SECONDS": str(CPU_SECONDS),
            "LOOPGRADE_WORKER_COUNT": "2",
            "LOOPGRADE_SUBMISSION_RATE_LIMIT": "0",  # the suite submits far more than a learner
            "LOOPGRADE_HOSTILE_TEST_SECRET": env_secret,
            "LOOPGRADE_SANDBOX_UIDS": f"{SANDBOX_UIDS[0]}-{SANDBOX_UIDS[-1]}",
        }
        created = subprocess.run(
            [sys.executable, "-m", "app.cli", "keys", "create", f"hostile-{backend}",
             "--data-dir", str(data_dir)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        (data_dir / "secret.txt").write_text(file_secret)
        with running_server(data_dir, root / "server.log", env) as (process, url):
            if backend.endswith("-pool"):  # the pool grades, not a cold fallback
                log = (root / "server.log").read_text()
                assert f"{POOL_SIZE} of {POOL_SIZE} slots ready" in log
            service = Service(
                backend=backend,
                url=url,
                headers={"Authorization": f"Bearer {created.stdout.splitlines()[-1]}"},
                process=process,
                data_dir=data_dir,
                database_url=database_url,
                log_path=root / "server.log",
                env_secret=env_secret,
                file_secret=file_secret,
                wall_timeout_seconds=wall_timeout_seconds,
            )
            try:
                yield service
            finally:
                service.client.close()
