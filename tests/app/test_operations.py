"""/healthz, /readyz, /metrics and the submission id on every log line, on a real server,
a real SQLite and the real sandbox."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from app.db import SessionFactory
from app.grading.queue import run_grading_job
from app.grading.submissions import create_submission
from app.models import OutboxMessage, OutboxStatus
from app.operations import SubmissionIdFilter
from app.outbox import add_to_outbox, register_delivery_kind
from app.settings import Settings
from tests.app.conftest import EXERCISE

SYNTAX_ERROR_CODE = "def train_step(model, optimizer, loss_fn, x, y)\n    return 0.0\n"


def never_delivered(sessions: SessionFactory, settings: Settings, payload: dict[str, Any]) -> None:
    raise ConnectionError("the receiver is down")


register_delivery_kind("tests.never-delivered", never_delivered)


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"no {name} in /metrics"
    return float(match[1])


@pytest.mark.cold_sandbox
def test_healthz_and_readyz(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    # Not ready until the trusted trajectories are computed, beside the start (seconds).
    deadline = time.monotonic() + 120
    while (ready := client.get("/readyz")).status_code == 503 and time.monotonic() < deadline:
        assert ready.json()["checks"]["queue"].startswith("computing the exercises' trusted")
        time.sleep(0.1)
    assert ready.status_code == 200, ready.text
    assert ready.json() == {
        "status": "ready",
        "checks": {"database": "ok", "queue": "ok", "sandbox": "ok"},
        # The app tests' servers run cold (tests/app/conftest.py): the status says so.
        "sandbox": ready.json()["sandbox"],
        "reactions": {
            "on_graded": ["send_score_to_lms", "send_to_webhooks"],
            "on_overridden": ["send_score_to_lms"],
            # The test kinds registered by the test modules (this one's at least) come too.
            "outbox_kinds": ready.json()["reactions"]["outbox_kinds"],
        },
        "refused_exercises": {},
    }
    assert "a cold sandbox per run" in ready.json()["sandbox"]
    assert {"lti-score", "lti-roster", "webhook"} <= set(ready.json()["reactions"]["outbox_kinds"])


def test_readyz_says_what_is_missing(client: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGRADE_SANDBOX", "bwrap")
    monkeypatch.setenv("LOOPGRADE_BWRAP", "/nonexistent/bwrap")
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.headers["Retry-After"] == "5"
    body = ready.json()
    assert body["status"] == "not ready"
    assert body["checks"]["database"] == "ok"
    assert "bubblewrap is not installed" in body["checks"]["sandbox"]


def test_metrics_count_the_queue_and_the_outbox_from_the_database(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    # Written by another process's sessions: this server's workers are not told of them.
    with sessions.begin() as session:
        for learner in ("a", "b"):
            create_submission(session, exercise_id=EXERCISE, learner=learner, code="x = 1\n")
        add_to_outbox(session, "tests.never-delivered", {})
        session.add(
            OutboxMessage(kind="tests.never-delivered", payload={}, status=OutboxStatus.FAILED)
        )

    text = client.get("/metrics").text
    assert metric(text, "loopgrade_queue_depth") == 2
    assert metric(text, "loopgrade_grading_in_progress") == 0
    assert metric(text, 'loopgrade_outbox_backlog{kind="tests.never-delivered"}') == 1
    assert metric(text, 'loopgrade_outbox_failed{kind="tests.never-delivered"}') == 1
    for name in ("loopgrade_grading_seconds", "loopgrade_grades_total"):
        assert f"# TYPE {name.removesuffix('_total')}" in text


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.addFilter(SubmissionIdFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_a_grading_logs_its_submission_id_on_every_line_and_is_measured(
    sessions: SessionFactory, settings: Settings, records: Records
) -> None:
    with sessions.begin() as session:
        submission_id = create_submission(
            session,
            exercise_id=EXERCISE,
            learner="a",
            code=SYNTAX_ERROR_CODE,
        ).id
    graded_before = sample("loopgrade_grading_seconds_count")
    syntax_errors_before = sample("loopgrade_grades_total", {"diagnosis": "syntax-error"})

    logging.getLogger("tests").info("before the grading")
    run_grading_job(sessions, submission_id, settings)
    logging.getLogger("tests").info("after the grading")

    during = records.records[1:-1]
    assert len(during) >= 2  # "grading" and the result, at least
    assert {r.submission_id for r in during} == {submission_id}  # type: ignore[attr-defined]
    assert records.records[0].submission_id == records.records[-1].submission_id == "-"  # type: ignore[attr-defined]
    assert sample("loopgrade_grading_seconds_count") == graded_before + 1
    assert (
        sample("loopgrade_grades_total", {"diagnosis": "syntax-error"}) == syntax_errors_before + 1
    )
