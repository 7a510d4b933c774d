"""What an operator watches: the Prometheus metrics (served by app/health.py at `/metrics`),
the submission id on every log line of a grading, and access log lines without the secrets
some links carry."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from urllib.parse import unquote

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
QUEUE_FULL_REFUSALS = prometheus_client.Counter(
    "loopgrade_queue_full_refusals",
    "Submissions this process refused for a full grading queue, by where: admission (early, "
    "before a database session or a sign-in) or intake (the exact count).",
    ["at"],
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


# Query parameters that carry a secret a browser opens once: a password reset link's token, an
# LTI launch's one-time tickets (`/lti/enter?ticket=`, `/lti/session-check?retry=`). A join code
# (`/sign-up?code=`) is shared with a whole class, and a deep-linking request is bound to its
# instructor's account: neither is a secret.
SECRET_QUERY_PARAMETERS = frozenset({"token", "ticket", "retry"})
_QUERY_PAIR = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&;\s\"]*)=(?P<value>[^&;\s\"]*)")


def redact_query_secrets(text: str) -> str:
    """`text` with the value of every secret query parameter in it replaced by "[redacted]"
    (its name read as the server reads it: percent-decoded)."""

    def redacted(pair: re.Match[str]) -> str:
        if unquote(pair["name"]).lower() not in SECRET_QUERY_PARAMETERS:
            return pair[0]
        return f"{pair['lead']}{pair['name']}=[redacted]"

    return _QUERY_PAIR.sub(redacted, text) if "=" in text else text


class QuerySecretsFilter(logging.Filter):
    """Redacts secret query values in a record's arguments (uvicorn's access log passes the
    request's path and query as one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_query_secrets(arg) if isinstance(arg, str) else arg for arg in record.args
            )
        return True


ACCESS_LOGGERS = ("uvicorn.access", "uvicorn.error")


def redact_access_logs() -> None:
    """Keep the secrets of opened links out of the access log (and uvicorn's own lines)."""
    for name in ACCESS_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuerySecretsFilter) for f in logger.filters):
            logger.addFilter(QuerySecretsFilter())
