"""Grading on many hosts: Celery on Redis (or RabbitMQ), when LOOPGRADE_BROKER_URL is set.

The API only sends; `loopgrade worker` grades with the same `run_grading_job` as the
in-process threads. A message carries only the submission id. It is acknowledged after the
task ran (`acks_late`) and put back when the worker process is lost, so a message outlives a
worker that dies mid-grade; the database lease decides who grades, and the sweep of every
worker sends again what a broker lost (app/grading/queue.py).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, Task
from celery.signals import worker_process_init

from app.db import (
    SessionFactory,
    create_db_engine,
    create_session_factory,
    database_revision,
    head_revision,
)
from app.grading.dry_runs import row_id_of
from app.grading.leases import LeaseSweeper
from app.grading.queue import (
    GradingOutcome,
    compute_trusted_trajectories,
    enqueue_after_commit,
    ignore_state_change,
    open_grading_runner,
    run_grading_job,
)
from app.grading.state_channel import StatePublisher
from app.integrations.keys import ToolKeysUnreadable, prepare_tool_keys, start_up_sealing
from app.outbox import OutboxDelivery
from app.reactions import install_reactions, installed_reactions
from app.settings import Settings
from sandbox import Runner

log = logging.getLogger(__name__)

GRADE_TASK = "loopgrade.grade_submission"
# A send that cannot reach the broker gives up quickly: the row is committed and queued, and
# the sweep sends it again; the request that created it must not hang on the broker.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5}


def create_celery(
    settings: Settings,
    sessions: SessionFactory | None = None,
    runner: Runner | None = None,
    publisher: StatePublisher | None = None,
) -> Celery:
    """The Celery app for `settings`; with `sessions` it can also run the grading task, and
    tell `publisher` of every change it commits."""
    celery = Celery("loopgrade", broker=settings.broker_url, set_as_current=False)
    celery.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # One message at a time per worker thread: a long grade does not hold others back.
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_default_queue=settings.worker_queue,
        task_time_limit=settings.worker_task_time_limit_seconds,
        task_publish_retry_policy=PUBLISH_RETRY_POLICY,
        broker_connection_retry_on_startup=True,
        # Keep retrying the broker forever: a worker outlives a Redis restart.
        broker_connection_max_retries=None,
        # Redis redelivers an unacknowledged message after this; the sweep is faster anyway.
        broker_transport_options={"visibility_timeout": settings.worker_task_time_limit_seconds},
        worker_hijack_root_logger=False,
    )

    # Not shared: a shared task would be registered on every Celery app of the process, and
    # the last one made (a send-only app, say) would run it.
    @celery.task(name=GRADE_TASK, bind=True, max_retries=None, shared=False)  # type: ignore[untyped-decorator]
    def grade_submission(task: Task[Any, Any], submission_id: str) -> None:
        if sessions is None:
            raise RuntimeError("this Celery app only sends tasks")
        # A submission's message is a wake-up: the worker grades the queued submission owed the
        # most, which may be another's (app/grading/fair_claim.py); every queued one has a
        # message of its own. A dry run's message names its own row (app/grading/dry_runs.py).
        run = run_grading_job(
            sessions,
            submission_id if row_id_of(submission_id) is not None else None,
            settings,
            runner=runner,
            on_state_change=ignore_state_change if publisher is None else publisher.state_changed,
        )
        if run.outcome is GradingOutcome.RETRY:
            # The row is queued again; the retry is a new message, sent with a delay.
            raise task.retry(countdown=run.retry_in_seconds)

    return celery


class CeleryDispatcher:
    """Sends submission ids to the Celery workers; grades nothing itself."""

    def __init__(self, settings: Settings, celery: Celery | None = None) -> None:
        self._settings = settings
        self._celery = celery or create_celery(settings)

    def start(self) -> None:
        pass

    def enqueue(self, submission_id: str) -> None:
        send_grading_task(self._celery, self._settings, submission_id)

    def stop(self) -> None:
        self._celery.close()

    def readiness_problem(self) -> str | None:
        try:
            with self._celery.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, interval_start=0, timeout=2)
        except Exception as exc:
            return f"the broker does not answer ({type(exc).__name__}: {exc})"
        return None


def send_grading_task(celery: Celery, settings: Settings, submission_id: str) -> None:
    """Send one id; a broker that is away is logged, not raised: the sweep sends it later."""
    try:
        celery.send_task(GRADE_TASK, args=[submission_id], queue=settings.worker_queue, retry=True)
    except Exception:
        log.exception(
            "submission %s: could not reach the broker; the sweep sends it again within %g s",
            submission_id,
            settings.redeliver_after_seconds,
        )


def run_worker(settings: Settings) -> int:
    """`loopgrade worker`: a Celery worker, the lease sweep and the outbox's delivery (the LMS
    scores and webhooks of the grades it stores), until a signal stops it."""
    install_reactions()
    engine = create_db_engine(
        settings.database_url, busy_timeout_seconds=settings.database_busy_timeout_seconds
    )
    current, head = database_revision(engine), head_revision()
    if current != head:
        log.error("the database is at migration %s, not %s: run 'loopgrade migrate'", current, head)
        return 1
    sessions = create_session_factory(engine)
    try:
        # The worker signs the LMS score requests of its grades: a wrong key-encryption key
        # stops its start, not the first delivery.
        with sessions.begin() as session:
            prepare_tool_keys(session, start_up_sealing(session, settings))
    except ToolKeysUnreadable as exc:
        log.error("%s", exc)
        engine.dispose()
        return 1
    log.info("a stored grade triggers: %s", installed_reactions())
    # Before the first task is taken (and before prefork children fork, so they inherit them):
    # a worker's first grading does not wait for them.
    if compute_trusted_trajectories() is None:
        log.info("the exercises' trusted trajectories are computed")
    # The threads share one runner (its warm pool); prefork children fork from this process,
    # so they run cold sandboxes rather than inherit a pool's zygotes.
    runner = open_grading_runner(settings) if settings.worker_pool == "threads" else None
    if runner is not None:
        log.info("sandbox: %s", runner.status)
    # Every change a grading commits is told to the web processes' progress streams.
    publisher = StatePublisher(settings)
    celery = create_celery(settings, sessions, runner, publisher)

    @worker_process_init.connect(weak=False)  # type: ignore[untyped-decorator]
    def _fresh_connections(**_: object) -> None:
        # A prefork child must not share the parent's database connections.
        engine.dispose(close=False)

    # What this process queues (the sweep's requeues) is sent to the broker once committed.
    enqueue_after_commit(sessions, CeleryDispatcher(settings, celery))
    sweeper = LeaseSweeper(sessions, settings)
    sweeper.start()
    # Woken by this process's own commits: what a grade here writes goes out at once.
    outbox = OutboxDelivery(sessions, settings)
    outbox.start()
    try:
        celery.worker_main(
            [
                "worker",
                f"--pool={settings.worker_pool}",
                f"--concurrency={settings.worker_count}",
                f"--queues={settings.worker_queue}",
                "--loglevel=INFO",
                # No worker-to-worker chatter: the database is what coordinates them.
                "--without-gossip",
                "--without-mingle",
            ]
        )
    finally:
        sweeper.stop()
        outbox.stop()
        publisher.close()
        if runner is not None:
            runner.close()
        engine.dispose()
    return 0
