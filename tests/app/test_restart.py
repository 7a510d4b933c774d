"""A server killed mid-grade loses nothing: after a restart the submission ends graded."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx

from app.db import create_db_engine, create_session_factory
from app.models import Submission
from app.settings import Settings
from tests.app.conftest import CORRECT_CODE, EXERCISE, loopgrade, wait_until_finished
from tests.servers import HTTP_TIMEOUT_SECONDS, running_server

# The dead server's claim expires within seconds, not the default half-minute. Still long
# enough that a loaded machine's renewals (every third of it) keep the first server's claim.
SHORT_LEASE = {"LOOPGRADE_LEASE_SECONDS": "6", "LOOPGRADE_SWEEP_INTERVAL_SECONDS": "1"}


def test_a_submission_survives_a_kill_mid_grade(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    log_path = tmp_path / "server.log"
    created = loopgrade("keys", "create", "restart-test", "--data-dir", str(data_dir))
    assert created.returncode == 0, created.stderr
    auth = {"Authorization": f"Bearer {created.stdout.splitlines()[-1]}"}
    # One grading in two servers: a cold sandbox for it, not a warm pool in each (two sandboxes
    # importing torch per start); a cold run also leaves the kill a wider moment mid-grade.
    env = {**os.environ, **SHORT_LEASE, "LOOPGRADE_SANDBOX_POOL_SIZE": "0"}

    with (
        running_server(data_dir, log_path, env) as (server, url),
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
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

    with (
        running_server(data_dir, log_path, env) as (_, url),
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        graded = wait_until_finished(client, location, auth, statuses=("graded", "error"))
    assert graded["status"] == "graded"
    assert graded["diagnosis"] == "correct"
    assert graded["score"] == graded["max_score"] > 0
    with sessions() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        assert row.attempts == 2
    engine.dispose()
