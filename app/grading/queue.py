"""Grading jobs and how they reach a worker: threads in this process, or Celery on many hosts.

One idea over 400 lines: the way of a job from the commit that queued it to a worker's stored
result.

A job is only a submission id; the submission row is the job's record. Jobs are handed over
by an `on_commit` hook once the transaction that queued them commits
(`submissions.queue_for_grading`), and `run_grading_job` may run any number of times for one
id: only the run that claims the row grades it, and only its claim may store a result.
A claim is a lease the worker renews while it grades (app/grading/leases.py).
LOOPGRADE_BROKER_URL chooses Celery instead of these threads (app/grading/dispatch.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Protocol

import graders
import sandbox
from app.db import SessionFactory, on_commit
from app.grading.dry_runs import row_id_of, run_dry_run_job
from app.grading.fair_claim import claim_fairest_submission
from app.grading.fair_share import FairShare, Taken, submission_owners
from app.grading.jobs import (
    GradingJob,
    claim_submission,
    record_error,
    record_report,
    release_claim,
)
from app.grading.leases import LeaseSweeper, lease_renewed, sweep
from app.grading.submissions import SUBMISSIONS_TO_GRADE
from app.models import SubmissionStatus, utc_now
from app.operations import SERVER_ERROR, logging_submission, record_grade
from app.settings import Settings
from graders.exercises import list_exercises
from graders.grading import GRADING_LIMITS, POOL_PROGRAM, trusted_trajectories
from graders.report import GradeReport
from sandbox import Limits, Runner, SandboxError

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

    def enqueue_all(submission_ids: list[str]) -> None:
        for submission_id in submission_ids:
            dispatcher.enqueue(submission_id)

    on_commit(sessions, SUBMISSIONS_TO_GRADE, enqueue_all)


class GradingOutcome(enum.Enum):
    GRADED = "graded"
    ERROR = "error"  # the server's own fault, stored on the submission
    NOT_CLAIMED = "not-claimed"  # graded or being graded elsewhere: nothing to do
    RETRY = "retry"  # the sandbox failed; the submission is queued again for a later try


@dataclasses.dataclass(frozen=True)
class GradingRun:
    """What one `run_grading_job` did; after a RETRY, send the id again in `retry_in_seconds`."""

    outcome: GradingOutcome
    retry_in_seconds: float = 0.0


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


# Told the id and new status of a submission whose change this process just committed: the
# progress streams of this process wake on it (app/progress.py), a Celery worker publishes it
# to the web processes (app/grading/state_channel.py).
StateChanged = Callable[[str, SubmissionStatus], None]


def ignore_state_change(submission_id: str, status: SubmissionStatus) -> None:
    pass


# The status a submission is left in by each outcome, told once the grading returns (graded: at
# its release, by whoever stores it; not claimed: whoever claimed it tells).
STATUS_AFTER = {
    GradingOutcome.ERROR: SubmissionStatus.ERROR,
    GradingOutcome.RETRY: SubmissionStatus.QUEUED,
}


# Takes a graded result's release (wait, store, tell) to run on a thread of its own.
ReleaseApart = Callable[[Callable[[], GradingRun]], None]


def run_grading_job(
    sessions: SessionFactory,
    submission_id: str | None,
    settings: Settings,
    *,
    runner: Runner | None = None,
    on_state_change: StateChanged = ignore_state_change,
    release_apart: ReleaseApart | None = None,
) -> GradingRun:
    """Claim the submission, grade it, store the result. No transaction is open while grading.

    `submission_id` None claims the queued submission owed the most (a Celery worker's wake-up:
    app/grading/fair_claim.py). A dry run's job id (app/grading/dry_runs.py) is graded for its
    own row instead. A SandboxError (the sandbox failed, not the learner's code) puts the
    submission back in the queue for a retry until `grading_max_attempts` claims were spent,
    then stores an error. `on_state_change` is told each change once it is committed: the claim
    (running), then the outcome. Every log line meanwhile carries the submission id.

    A report is stored only at its release (graders.grading.Graded): this thread waits for it,
    or with `release_apart`, hands the wait and the store to it and returns GRADED at once.
    """
    dry_run_row = None if submission_id is None else row_id_of(submission_id)
    if dry_run_row is not None:
        # A regrade's dry run: graded the same way, stored on its own row only.
        retry_in_seconds = run_dry_run_job(
            sessions, dry_run_row, settings, limits=grading_limits(settings), runner=runner
        )
        if retry_in_seconds is not None:
            return GradingRun(GradingOutcome.RETRY, retry_in_seconds)
        return GradingRun(GradingOutcome.GRADED)
    with sessions.begin() as session:
        if submission_id is None:
            job = claim_fairest_submission(session, lease_seconds=settings.lease_seconds)
        else:
            job = claim_submission(session, submission_id, lease_seconds=settings.lease_seconds)
    if job is None:
        log.info("submission %s: not claimable (graded or being graded), skipped", submission_id)
        return GradingRun(GradingOutcome.NOT_CLAIMED)
    with logging_submission(job.submission_id):
        on_state_change(job.submission_id, SubmissionStatus.RUNNING)
        run = _grade(sessions, job, settings, runner, on_state_change, release_apart)
        status = STATUS_AFTER.get(run.outcome)
        if status is not None:
            on_state_change(job.submission_id, status)
        return run


def _grade(
    sessions: SessionFactory,
    job: GradingJob,
    settings: Settings,
    runner: Runner | None,
    on_state_change: StateChanged,
    release_apart: ReleaseApart | None,
) -> GradingRun:
    submission_id = job.submission_id
    log.info(
        "submission %s: grading (exercise %s, attempt %d)",
        submission_id,
        job.exercise_id,
        job.attempt,
    )
    started = time.monotonic()
    try:
        with lease_renewed(sessions, job, settings.lease_seconds):
            graded = graders.grade_with_release(
                job.exercise_id, job.code, grading_limits(settings), runner, job.learner_key
            )
    except SandboxError as exc:
        if job.attempt < settings.grading_max_attempts:
            log.warning(
                "submission %s: sandbox fault on attempt %d, queued again: %s",
                submission_id,
                job.attempt,
                exc,
            )
            with sessions.begin() as session:
                release_claim(session, job)
            return GradingRun(GradingOutcome.RETRY, settings.retry_delay_seconds(job.attempt))
        return _store_error(sessions, job, exc, started)
    except Exception as exc:
        # Learner mistakes come back as reports; an exception is the server's own fault.
        return _store_error(sessions, job, exc, started)

    def release() -> GradingRun:
        # Not stored, so not seen (graded_at, the status, the page's `done`) before its release:
        # the moment then says nothing finer of the hidden cases than their budget
        # (graders.grading.HiddenBudget). The sandbox slot is free already.
        with (
            logging_submission(submission_id),
            lease_renewed(sessions, job, settings.lease_seconds),
        ):
            time.sleep(max(0.0, graded.release_at - time.monotonic()))
            if graded.hidden_started_at is not None:
                # For the operator (and tests/hosts): when the hidden part began, on graded_at's
                # clock; read after the monotonic one, so never earlier than it was.
                since = time.monotonic() - graded.hidden_started_at
                log.info(
                    "submission %s: released %s s after its hidden cases began at %s",
                    submission_id,
                    graded.release_at - graded.hidden_started_at,
                    (utc_now() - timedelta(seconds=since)).isoformat(),
                )
            run = _store_report(sessions, job, graded.report, started)
            if run.outcome is GradingOutcome.GRADED:
                on_state_change(submission_id, SubmissionStatus.GRADED)
            return run

    if release_apart is None:
        return release()
    release_apart(release)
    return GradingRun(GradingOutcome.GRADED)


def _store_report(
    sessions: SessionFactory, job: GradingJob, report: GradeReport, started: float
) -> GradingRun:
    # The wall time includes the wait for the release: it too is no finer than the budget.
    wall_seconds = time.monotonic() - started
    with sessions.begin() as session:
        stored = record_report(session, job, report, grading_wall_seconds=wall_seconds)
    record_grade(report.diagnosis, wall_seconds)
    log.info(
        "submission %s: %s, %g/%g in %.2f s%s",
        job.submission_id,
        report.diagnosis,
        report.score,
        report.max_score,
        wall_seconds,
        "" if stored else " (not stored: the claim was taken over)",
    )
    return GradingRun(GradingOutcome.GRADED if stored else GradingOutcome.NOT_CLAIMED)


def _store_error(
    sessions: SessionFactory, job: GradingJob, exc: Exception, started: float
) -> GradingRun:
    log.error(
        "submission %s: grading failed (exercise %s, attempt %d)",
        job.submission_id,
        job.exercise_id,
        job.attempt,
        exc_info=exc,
    )
    with sessions.begin() as session:
        record_error(session, job, f"{type(exc).__name__}: {exc}")
    record_grade(SERVER_ERROR, time.monotonic() - started)
    return GradingRun(GradingOutcome.ERROR)


def compute_trusted_trajectories() -> str | None:
    """Compute every exercise's trusted trajectories (about a second and a half), so that no
    grading waits for them; what failed, or None. Each grading tries again itself on a failure,
    and its error then says what failed."""
    try:
        for exercise in list_exercises():
            trusted_trajectories(exercise)
    except Exception as exc:
        log.exception("computing the trusted trajectories failed")
        return f"computing the trusted trajectories failed: {exc}"
    return None


def owner_share(slots: int) -> int:
    """The most slots one owner's runs may hold at once: all but one, so that a slot is always
    kept for somebody else (a run that only sleeps holds its slot until its wall-clock
    backstop, and slots already taken are not given back when another owner arrives). With one
    slot, that one: its owner's next run waits behind everyone else's."""
    return max(1, slots - 1)


class ThreadPoolDispatcher:
    """`worker_count` grading threads in this process, and the sweep that feeds them. A free
    thread takes the submission `FairShare` chooses, not the oldest: no owner holds more than
    its share of the sandbox's slots (`owner_share`)."""

    def __init__(
        self,
        sessions: SessionFactory,
        settings: Settings,
        *,
        runner: Runner | None = None,
        on_state_change: StateChanged = ignore_state_change,
    ) -> None:
        self._sessions = sessions
        self._settings = settings
        self._runner = runner
        self._on_state_change = on_state_change
        self._executor: ThreadPoolExecutor | None = None
        self._sweeper = LeaseSweeper(sessions, settings)
        self._retry_timers: set[threading.Timer] = set()
        self._releases: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._trusted_computed = threading.Event()
        self._trusted_failure: str | None = None
        self._trusted_thread: threading.Thread | None = None
        slots = min(settings.sandbox_pool_size or settings.worker_count, settings.worker_count)
        self._fair_share = FairShare(
            lambda ids: submission_owners(sessions, ids), max_per_owner=owner_share(slots)
        )

    def start(self) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=self._settings.worker_count, thread_name_prefix="grader"
        )
        # Beside the start, not before it: the first grading then rarely waits for them, and
        # /readyz says "not ready" until they are there.
        self._trusted_computed.clear()
        self._trusted_thread = threading.Thread(
            target=self._compute_trusted, name="trusted-trajectories", daemon=True
        )
        self._trusted_thread.start()
        # This process's queue is empty at start: whatever is queued in the database is ours.
        sweep(self._sessions, self._settings, all_queued=True)
        self._sweeper.start()

    def _compute_trusted(self) -> None:
        self._trusted_failure = compute_trusted_trajectories()
        self._trusted_computed.set()

    def enqueue(self, submission_id: str) -> None:
        if self._executor is None:
            raise RuntimeError("dispatcher not started")
        self._fair_share.add(submission_id)
        self._executor.submit(self._run_waiting)

    def stop(self) -> None:
        """Finish the jobs in progress; the rest stay queued in the database for the next start."""
        self._sweeper.stop()
        self._fair_share.clear()
        with self._lock:
            for timer in self._retry_timers:
                timer.cancel()
            self._retry_timers.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        with self._lock:
            releases = list(self._releases)
        for thread in releases:  # each a fraction of a second, at most the hidden wall budget
            thread.join()
        # Waited for, not left running: a process that exits while this thread is inside torch
        # aborts ("terminate called without an active exception").
        if self._trusted_thread is not None:
            self._trusted_thread.join()
            self._trusted_thread = None

    def readiness_problem(self) -> str | None:
        if self._executor is None:
            return "the grading threads are not started"
        if not self._trusted_computed.is_set():
            return "computing the exercises' trusted trajectories (seconds after a start)"
        return self._trusted_failure

    def _run_waiting(self) -> None:
        """Grade what FairShare hands out until nothing waits that may run now (a run that
        ends may free its owner's next one: the thread that ended it takes it).

        A run whose result waits for its release counts as its owner's until that release,
        not only until the run ends: otherwise an owner holding all its slots would see its
        next submission start the moment a hidden part ended, finer than the release's delays
        (docs/security.md#the-time-a-grading-takes)."""
        while (taken := self._fair_share.take()) is not None:
            released_apart = False

            def release_apart(release: Callable[[], GradingRun], taken: Taken = taken) -> None:
                nonlocal released_apart
                released_apart = True
                self._release_apart(release, then=lambda: self._owner_done(taken))

            try:
                self._run(taken.submission_id, release_apart)
            finally:
                if not released_apart:
                    self._fair_share.done(taken)

    def _owner_done(self, taken: Taken) -> None:
        """A released run no longer counts as its owner's: its owner's next may now run."""
        self._fair_share.done(taken)
        with self._lock:
            executor = self._executor
        if executor is not None:
            with contextlib.suppress(RuntimeError):  # shut down meanwhile: nothing more runs
                executor.submit(self._run_waiting)

    def _run(self, submission_id: str, release_apart: ReleaseApart) -> None:
        try:
            run = run_grading_job(
                self._sessions,
                submission_id,
                self._settings,
                runner=self._runner,
                on_state_change=self._on_state_change,
                release_apart=release_apart,
            )
        except Exception:
            # The row stays queued or running; the sweep takes it up again.
            log.exception("submission %s: grading job crashed", submission_id)
            return
        if run.outcome is GradingOutcome.RETRY:
            timer = threading.Timer(run.retry_in_seconds, self._retry, [submission_id])
            timer.daemon = True
            with self._lock:
                if self._executor is None:
                    return  # stopping: the sweep of the next start sends it
                self._retry_timers.add(timer)
            timer.start()

    def _release_apart(self, release: Callable[[], GradingRun], then: Callable[[], None]) -> None:
        """Wait for a result's release on a thread of its own, then call `then`: the grading
        thread takes the next submission meanwhile, so a burst loses no throughput to the
        waits."""

        def run() -> None:
            try:
                release()
            except Exception:
                # The row stays running; its lease expires and the sweep grades it again.
                log.exception("storing a graded result failed")
            finally:
                with self._lock:
                    self._releases.discard(threading.current_thread())
                then()

        thread = threading.Thread(target=run, name="grading-release", daemon=True)
        with self._lock:
            self._releases.add(thread)
        thread.start()

    def _retry(self, submission_id: str) -> None:
        with self._lock:
            self._retry_timers = {timer for timer in self._retry_timers if timer.is_alive()}
            if self._executor is None:
                return
            self._fair_share.add(submission_id)
            self._executor.submit(self._run_waiting)
