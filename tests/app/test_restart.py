"""A server killed mid-grade loses nothing: after a restart the submission ends graded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx

from app.db import create_db_engine, create_session_factory
from app.models import Submission
from app.settings import Settings
from tests.app.conftest import CORRECT_CODE, EXERCISE, REPO, loopgrade, wait_until_finished


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serve(data_dir: Path, log_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`loopgrade serve` in its own process group; yields the process and its URL once up."""
    port = free_port()
    command = [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(data_dir)]
    with log_path.open("ab") as log:
        server = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"server exited: {log_path.read_text()}"
            assert time.monotonic() < deadline, f"server not up: {log_path.read_text()}"
            try:
                if httpx.get(f"{url}/api/v1/exercises", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield server, url
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
        # Anything the server left behind in its group (a sandbox, say) goes with it.
        with suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_a_submission_survives_a_kill_mid_grade(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    log_path = tmp_path / "server.log"
    created = loopgrade("keys", "create", "restart-test", "--data-dir", str(data_dir))
    assert created.returncode == 0, created.stderr
    auth = {"Authorization": f"Bearer {created.stdout.splitlines()[-1]}"}

    with serve(data_dir, log_path) as (server, url), httpx.Client(base_url=url) as client:
        response = client.post(
            "/api/v1/submissions",
            headers=auth,
            json={"exercise": EXERCISE, "learner": "survivor", "code": CORRECT_CODE},
        )
        assert response.status_code == 202, response.text
        location = response.headers["location"]
        wait_until_finished(client, location, auth, statuses=("running", "graded", "error"))
        server.send_signal(signal.SIGKILL)
        server.wait()

    engine = create_db_engine(Settings(data_dir=data_dir).database_url)
    sessions = create_session_factory(engine)
    submission_id = response.json()["id"]
    with sessions() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        # Killed while grading: the grade had not been written.
        assert (row.status, row.attempts) == ("running", 1)

    with serve(data_dir, log_path) as (_, url), httpx.Client(base_url=url) as client:
        graded = wait_until_finished(client, location, auth, statuses=("graded", "error"))
    assert graded["status"] == "graded"
    assert graded["diagnosis"] == "correct"
    assert graded["score"] == graded["max_score"] > 0
    with sessions() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        assert row.attempts == 2
    engine.dispose()
