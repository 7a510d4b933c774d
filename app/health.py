"""The operator's endpoints: `/readyz` (database, queue, sandbox, and what a stored grade
triggers here) and `/metrics` (Prometheus; the metrics are app/operations.py's). `/healthz`
(alive) is answered by admission control, before any lane (app/admission.py).
"""

from __future__ import annotations

import prometheus_client
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import func, select, text

import sandbox
from app.db import SessionFactory
from app.models import OutboxMessage, OutboxStatus, Submission, SubmissionStatus
from app.operations import GRADING_IN_PROGRESS, OUTBOX_BACKLOG, OUTBOX_FAILED, QUEUE_DEPTH
from app.reactions import installed_reactions
from graders.exercises import refused_exercises

router = APIRouter(include_in_schema=False)


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


@router.get("/readyz")
def readyz(request: Request) -> Response:
    """Ready to take work: the database answers, the queue takes jobs, a sandbox runs; and what
    a stored grade triggers here."""
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
