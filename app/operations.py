"""What an operator watches: the Prometheus metrics (served by app/health.py at `/metrics`)
and the submission id on every log line of a grading."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import prometheus_client

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
