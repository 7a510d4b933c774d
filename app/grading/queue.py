"""Grading jobs and how they reach a worker: a thread pool in this process (Celery later).

A job is only a submission id; the submission row is the job's record. Jobs are handed over
by an `after_commit` hook once the transaction that queued them commits
(`submissions.queue_for_grading`), and `run_grading_job` may run any number of times
for one id: only the run that claims the queued row grades it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Protocol

from fastapi import Depends, Request
from sqlalchemy import event
from sqlalchemy.orm import Session

import graders
import sandbox
from app.db import SessionFactory
from app.grading.submissions import (
    SUBMISSIONS_TO_GRADE,
    claim_submission,
    record_error,
    record_report,
    requeue_unfinished,
)
from app.operations import SERVER_ERROR, logging_submission, record_grade
from app.settings import Settings
from graders.grading import GRADING_LIMITS, POOL_PROGRAM
from sandbox import Limits, Runner

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    """Gets submission ids to workers. `enqueue` is called only after the row is committed."""

    def start(self) -> None: ...

    def enqueue(self, submission_id: str) -> None: ...

    def stop(self) -> None: ...

    def readiness_problem(self) -> str | None:
        """Why jobs cannot be taken now (for /readyz), or None."""
        ...


def enqueue_after_commit(sessions: SessionFactory, dispatcher: Dispatcher) -> None:
    """Hand every submission a transaction queued to `dispatcher` once it commits; a rolled-back
    transaction's are dropped."""

    @event.listens_for(sessions, "after_commit")
    def _enqueue_committed(session: Session) -> None:
        for submission_id in session.info.pop(SUBMISSIONS_TO_GRADE, []):
            dispatcher.enqueue(submission_id)

    @event.listens_for(sessions, "after_rollback")
    def _drop_rolled_back(session: Session) -> None:
        session.info.pop(SUBMISSIONS_TO_GRADE, None)


def grading_limits(settings: Settings) -> Limits | None:
    """The grader's limits with the operator's LOOPGRADE_GRADING_* overrides; None if none."""
    wall, cpu = settings.grading_wall_timeout_seconds, settings.grading_cpu_seconds
    if wall is None and cpu is None:
        return None
    return dataclasses.replace(
        GRADING_LIMITS,
        wall_timeout_seconds=wall or GRADING_LIMITS.wall_timeout_seconds,
        cpu_seconds=cpu or GRADING_LIMITS.cpu_seconds,
    )


def open_grading_runner(settings: Settings) -> Runner:
    """The sandbox runner of this process: its backend probed once, the warm pool started.

    Raises sandbox.SandboxUnavailable when no backend works here.
    """
    return sandbox.open_runner(
        settings.sandbox, pool=POOL_PROGRAM, pool_size=settings.sandbox_pool_size
    )


def run_grading_job(
    sessions: SessionFactory,
    submission_id: str,
    *,
    limits: Limits | None = None,
    runner: Runner | None = None,
) -> None:
    """Claim the submission, grade it, store the result. No transaction is open while grading.

    Every log line meanwhile carries the submission id.
    """
    with logging_submission(submission_id):
        _grade(sessions, submission_id, limits, runner)


def _grade(
    sessions: SessionFactory, submission_id: str, limits: Limits | None, runner: Runner | None
) -> None:
    with sessions.begin() as session:
        job = claim_submission(session, submission_id)
    if job is None:
        log.info("submission %s: not queued any more, nothing to do", submission_id)
        return

    log.info(
        "submission %s: grading (exercise %s, attempt %d)",
        submission_id,
        job.exercise_id,
        job.attempt,
    )
    started = time.monotonic()
    try:
        report = graders.grade(job.exercise_id, job.code, limits, runner)
    except Exception as exc:
        # Learner mistakes come back as reports; an exception is the server's own fault.
        log.exception(
            "submission %s: grading failed (exercise %s, attempt %d)",
            submission_id,
            job.exercise_id,
            job.attempt,
        )
        with sessions.begin() as session:
            record_error(session, job, f"{type(exc).__name__}: {exc}")
        record_grade(SERVER_ERROR, time.monotonic() - started)
        return

    with sessions.begin() as session:
        stored = record_report(session, job, report)
    record_grade(report.diagnosis, time.monotonic() - started)
    log.info(
        "submission %s: %s, %g/%g in %.2f s%s",
        submission_id,
        report.diagnosis,
        report.score,
        report.max_score,
        time.monotonic() - started,
        "" if stored else " (not stored: the claim was taken over)",
    )


def requeue_after_restart(sessions: SessionFactory) -> int:
    """Queue again every submission a previous process left queued or running."""
    with sessions.begin() as session:
        submission_ids = requeue_unfinished(session)
    if submission_ids:
        log.info("requeued %d unfinished submission(s) from before the start", len(submission_ids))
    return len(submission_ids)


class ThreadPoolDispatcher:
    """`worker_count` grading threads in this process."""

    def __init__(
        self,
        sessions: SessionFactory,
        *,
        worker_count: int,
        limits: Limits | None = None,
        runner: Runner | None = None,
    ) -> None:
        self._sessions = sessions
        self._worker_count = worker_count
        self._limits = limits
        self._runner = runner
        self._executor: ThreadPoolExecutor | None = None

    def start(self) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=self._worker_count, thread_name_prefix="grader"
        )

    def enqueue(self, submission_id: str) -> None:
        if self._executor is None:
            raise RuntimeError("dispatcher not started")
        self._executor.submit(self._run, submission_id)

    def stop(self) -> None:
        """Finish the jobs in progress; the rest stay queued in the database for the next start."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def readiness_problem(self) -> str | None:
        return "the grading threads are not started" if self._executor is None else None

    def _run(self, submission_id: str) -> None:
        try:
            run_grading_job(self._sessions, submission_id, limits=self._limits, runner=self._runner)
        except Exception:
            # The row stays queued or running; the next start takes it up again.
            log.exception("submission %s: grading job crashed", submission_id)


def get_dispatcher(request: Request) -> Dispatcher:
    dispatcher: Dispatcher = request.app.state.dispatcher
    return dispatcher


DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]
