"""What an operator watches: `/healthz` (alive), `/readyz` (database, queue, sandbox),
Prometheus metrics at `/metrics`, and the submission id on every log line of a grading."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import prometheus_client
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import func, select, text

import sandbox
from app.db import SessionFactory
from app.models import OutboxMessage, OutboxStatus, Submission, SubmissionStatus
from graders.exercises import refused_exercises

router = APIRouter(include_in_schema=False)

# The diagnoses that mean a sandbox cap stopped the code.
SANDBOX_LIMIT_DIAGNOSES = ("timeout", "memory-limit", "output-limit")
# What a grade counts as when the server, not the learner, failed.
SERVER_ERROR = "server-error"

QUEUE_DEPTH = prometheus_client.Gauge(
    "loopgrade_queue_depth", "Submissions queued for grading, on every host."
)
GRADING_IN_PROGRESS = prometheus_client.Gauge(
    "loopgrade_grading_in_progress", "Submissions being graded now, on every host."
)
GRADING_SECONDS = prometheus_client.Histogram(
    "loopgrade_grading_seconds",
    "Time to grade one submission in this process (both sandbox runs and the judging).",
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
)
GRADES = prometheus_client.Counter(
    "loopgrade_grades", "Grades made in this process, by diagnosis.", ["diagnosis"]
)
SANDBOX_LIMIT_HITS = prometheus_client.Counter(
    "loopgrade_sandbox_limit_hits",
    "Grades the sandbox stopped at a cap, by cap (timeout, memory-limit, output-limit).",
    ["limit"],
)
OUTBOX_BACKLOG = prometheus_client.Gauge(
    "loopgrade_outbox_backlog", "Outbox messages not yet delivered, by kind.", ["kind"]
)
OUTBOX_FAILED = prometheus_client.Gauge(
    "loopgrade_outbox_failed", "Outbox messages given up on, by kind.", ["kind"]
)
OUTBOX_DELIVERY_FAILURES = prometheus_client.Counter(
    "loopgrade_outbox_delivery_failures",
    "Failed delivery attempts in this process (each is retried or given up), by kind.",
    ["kind"],
)


def record_grade(diagnosis: str, seconds: float) -> None:
    GRADING_SECONDS.observe(seconds)
    GRADES.labels(diagnosis).inc()
    if diagnosis in SANDBOX_LIMIT_DIAGNOSES:
        SANDBOX_LIMIT_HITS.labels(diagnosis).inc()


def _count_from_database(sessions: SessionFactory) -> None:
    """Set the gauges that describe shared state (every host's) from the database."""
    with sessions() as session:
        by_status: dict[str, int] = {
            status: count
            for status, count in session.execute(
                select(Submission.status, func.count())
                .where(Submission.status.in_([SubmissionStatus.QUEUED, SubmissionStatus.RUNNING]))
                .group_by(Submission.status)
            )
        }
        outbox = session.execute(
            select(OutboxMessage.kind, OutboxMessage.status, func.count())
            .where(OutboxMessage.status != OutboxStatus.DELIVERED)
            .group_by(OutboxMessage.kind, OutboxMessage.status)
        ).all()
        QUEUE_DEPTH.set(by_status.get(SubmissionStatus.QUEUED, 0))
        GRADING_IN_PROGRESS.set(by_status.get(SubmissionStatus.RUNNING, 0))
        OUTBOX_BACKLOG.clear()
        OUTBOX_FAILED.clear()
        for kind, status, count in outbox:
            gauge = OUTBOX_BACKLOG if status == OutboxStatus.PENDING else OUTBOX_FAILED
            gauge.labels(kind).set(count)


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Alive: the process answers. (Whether it can work is /readyz.)"""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request) -> Response:
    """Ready to take work: the database answers, the queue takes jobs, a sandbox runs; and what
    a stored grade triggers here."""
    from app.reactions import installed_reactions  # app.reactions imports the outbox, and it us

    problems: dict[str, str] = {}
    try:
        with request.app.state.sessions() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:
        problems["database"] = f"{type(exc).__name__}: {exc}"
    queue_problem = request.app.state.dispatcher.readiness_problem()
    if queue_problem is not None:
        problems["queue"] = queue_problem
    if request.app.state.runner is not None:  # with a broker, the workers run the sandboxes
        try:
            sandbox.check_available()
        except sandbox.SandboxUnavailable as exc:
            problems["sandbox"] = str(exc)
    checks = {name: problems.get(name, "ok") for name in ("database", "queue", "sandbox")}
    return JSONResponse(
        {
            "status": "not ready" if problems else "ready",
            "checks": checks,
            # The runner opened at start-up: its backend, and the warm pool's slots or "cold".
            "sandbox": (
                "none here: the workers grade"
                if request.app.state.runner is None
                else request.app.state.runner.status
            ),
            "reactions": installed_reactions()._asdict(),
            # Served without them: folder -> why it was refused (graders/exercises.py).
            "refused_exercises": refused_exercises(),
        },
        status_code=503 if problems else 200,
        headers={"Retry-After": "5"} if problems else None,
    )


@router.get("/metrics")
def metrics(request: Request) -> Response:
    _count_from_database(request.app.state.sessions)
    return Response(
        prometheus_client.generate_latest(), media_type=prometheus_client.CONTENT_TYPE_LATEST
    )


_submission_being_graded: ContextVar[str | None] = ContextVar("submission_being_graded")


@contextmanager
def logging_submission(submission_id: str) -> Iterator[None]:
    """Every log line in this block (this thread) carries the submission's id."""
    token = _submission_being_graded.set(submission_id)
    try:
        yield
    finally:
        _submission_being_graded.reset(token)


class SubmissionIdFilter(logging.Filter):
    """Sets `%(submission_id)s` on each record: the submission being graded, or "-"."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.submission_id = _submission_being_graded.get(None) or "-"
        return True


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [submission %(submission_id)s]: %(message)s"


def configure_logging() -> None:
    """Log to stderr, each line with the submission it is about (loopgrade's commands)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(SubmissionIdFilter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
