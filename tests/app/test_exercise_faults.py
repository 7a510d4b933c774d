"""Faults of an exercise's configuration are the operator's, never a learner's: a folder the
grader cannot judge is refused and named on /readyz and in the log while a real server serves
the others; a grade that fails on the exercise's own fault is stored as `error`, and graded
again once the exercise is fixed."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import httpx
import pytest

from app.db import SessionFactory
from app.grading.queue import GradingOutcome, run_grading_job
from app.grading.regrades import request_regrade
from app.grading.submissions import create_submission
from app.models import RegradeReason, Submission
from app.people.accounts import create_user
from app.settings import Settings
from graders import grading, proving
from graders.exercises import get_exercise, load_exercise
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.servers import running_server, wait_until_ready

REPO_EXERCISES = Path(__file__).resolve().parents[2] / "exercises"


def test_a_refused_folder_is_named_and_the_others_are_served(tmp_path: Path) -> None:
    """A malformed folder, and one that loads but is unsound (a reference without zero_grad,
    which check-exercises refuses): neither is served, and each is named with its reason."""
    folders = tmp_path / "exercises"
    shutil.copytree(REPO_EXERCISES, folders)
    toml = folders / "train-step" / "exercise.toml"
    toml.write_text(toml.read_text().replace("weights-match = 3", "weights-matches = 3"))
    solution = folders / "adam-step" / "solution.py"
    solution.write_text(solution.read_text().replace("    optimizer.zero_grad()\n", ""))
    # Proven here first, as check-exercises would: the server reads the kept proof (the tests'
    # LOOPGRADE_PROOF_CACHE_DIR), and its start stays as short as any other test server's.
    assert proving.proven_problems(load_exercise(folders / "adam-step"))
    log_path = tmp_path / "server.log"
    # It grades nothing: no warm pool to start (two sandboxes importing torch).
    env = {
        **os.environ,
        "LOOPGRADE_EXERCISES_DIR": str(folders),
        "LOOPGRADE_SANDBOX_POOL_SIZE": "0",
    }
    with running_server(tmp_path / "data", log_path, env) as (_, url):
        served = httpx.get(f"{url}/api/v1/exercises").json()
        ready = wait_until_ready(url)  # the good folders' trajectories computed: ready
        page = httpx.get(f"{url}/exercises/adam-step")
    others = sorted(
        p.name
        for p in REPO_EXERCISES.iterdir()
        if p.is_dir() and p.name not in {"train-step", "adam-step"}
    )
    assert sorted(e["id"] for e in served) == others
    refused = ready.json()["refused_exercises"]
    assert sorted(refused) == ["adam-step", "train-step"]
    assert "checks: 'weights-matches' is no check of kind 'step-function'" in refused["train-step"]
    assert refused["adam-step"].startswith(f"{folders / 'adam-step'}: not served, unsound (")
    assert "the reference solution scores" in refused["adam-step"]
    assert page.status_code == 404
    log = log_path.read_text()
    assert "exercise folder train-step is not served" in log
    assert "exercise folder adam-step is not served" in log


def test_a_grade_the_exercise_cannot_judge_is_an_error_not_a_score(
    sessions: SessionFactory,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    exercise = get_exercise(EXERCISE)
    # A changed exercise.toml changes the folder's content hash, the version: judgments and
    # trajectories cached for the good folder (by an earlier test) are not this one's.
    broken = exercise.model_copy(
        update={
            "checks": {**exercise.checks, "no-such-check": 1.0},
            "version": f"{exercise.version}-no-such-check",
        }
    )
    monkeypatch.setattr(grading, "get_exercise", lambda _id: broken)
    with sessions.begin() as session:
        submission_id = create_submission(
            session, exercise_id=EXERCISE, learner="a", code=CORRECT_CODE
        ).id
    with caplog.at_level(logging.ERROR):
        run = run_grading_job(sessions, submission_id, settings)
    assert run.outcome is GradingOutcome.ERROR
    with sessions() as session:
        stored = session.get(Submission, submission_id)
        assert stored is not None
        assert (stored.status, stored.score, stored.diagnosis) == ("error", None, None)
    assert f"submission {submission_id}: grading failed (exercise {EXERCISE}" in caplog.text
    assert "cannot judge its own reference" in caplog.text

    # The operator fixes the exercise; a regrade grades the submission as it deserves.
    monkeypatch.undo()
    with sessions.begin() as session:
        tess = create_user(session, email="tess@example.org", name="Tess", password="x" * 12)
        stored = session.get(Submission, submission_id)
        assert stored is not None
        request_regrade(session, stored, by=tess, reason=RegradeReason.GRADER_UPDATED)
    assert run_grading_job(sessions, submission_id, settings).outcome is GradingOutcome.GRADED
    with sessions() as session:
        stored = session.get(Submission, submission_id)
        assert stored is not None and (stored.status, stored.score) == ("graded", 10)
