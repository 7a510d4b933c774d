"""Grading leases: a worker renews the lease on each submission it grades; the sweep puts back
submissions whose lease expired (their worker died) and sends again those queued so long that
their message must have been lost.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta

from app.db import SessionFactory
from app.grading.dry_runs import requeue_dry_runs
from app.grading.submissions import (
    GradingJob,
    renew_lease,
    requeue_expired_leases,
    requeue_waiting,
)
from app.models import utc_now
from app.settings import Settings

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class _Lease:
    sessions: SessionFactory
    job: GradingJob
    seconds: float
    renew_at: float  # time.monotonic()


class _LeaseRenewer:
    """Renews the leases of this process's gradings in progress, each every third of its
    lease, from one thread: a thread started and joined per grading held the grading thread
    up for a GIL handoff each way, 4-5% of its time in a burst
    (docs/performance.md#smaller-decisions)."""

    def __init__(self) -> None:
        self._reset()
        # A prefork Celery child starts its own thread; the parent's lock may be held at the fork.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._changed = threading.Condition()
        self._leases: set[_Lease] = set()
        self._thread: threading.Thread | None = None

    @contextmanager
    def held(self, sessions: SessionFactory, job: GradingJob, seconds: float) -> Iterator[None]:
        lease = _Lease(sessions, job, seconds, time.monotonic() + seconds / 3)
        with self._changed:
            earliest = min((held.renew_at for held in self._leases), default=None)
            self._leases.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)
                self._thread.start()
            elif earliest is None or lease.renew_at < earliest:
                # The thread sleeps until the earliest lease is due: woken only when this one
                # is due sooner. A wake per grading cost a GIL handoff each way for nothing
                # (leases of one process share their length, so a new one is due last).
                self._changed.notify()
        try:
            yield
        finally:
            with self._changed:
                self._leases.discard(lease)

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                due = [lease for lease in self._leases if lease.renew_at <= now]
                if not due:
                    next_at = min((lease.renew_at for lease in self._leases), default=None)
                    self._changed.wait(None if next_at is None else next_at - now)
                    continue
                for lease in due:
                    lease.renew_at = now + lease.seconds / 3
            for lease in due:
                if not self._renew(lease):
                    with self._changed:
                        self._leases.discard(lease)

    def _renew(self, lease: _Lease) -> bool:
        """False once the lease is lost; a database error is logged and tried again later."""
        try:
            with lease.sessions.begin() as session:
                if renew_lease(session, lease.job, lease_seconds=lease.seconds):
                    return True
        except Exception:
            # The database may be back before the lease runs out: keep trying.
            log.exception("submission %s: could not renew the lease", lease.job.submission_id)
            return True
        with self._changed:
            if lease in self._leases:  # not merely a grading that has just stored its result
                log.warning(
                    "submission %s: lease lost; this attempt's result will be dropped",
                    lease.job.submission_id,
                )
        return False


_LEASE_RENEWER = _LeaseRenewer()


def lease_renewed(
    sessions: SessionFactory, job: GradingJob, lease_seconds: float
) -> AbstractContextManager[None]:
    """Renew the job's lease every third of `lease_seconds` while the block runs."""
    return _LEASE_RENEWER.held(sessions, job, lease_seconds)


def sweep(sessions: SessionFactory, settings: Settings, *, all_queued: bool = False) -> list[str]:
    """Requeue expired leases and the queued rows to send again; return their ids.

    They are handed to the workers by the after-commit hook (`enqueue_after_commit`).
    `all_queued` takes every queued row: for a start whose in-process queue is empty.
    """
    queued_before = (
        None if all_queued else utc_now() - timedelta(seconds=settings.redeliver_after_seconds)
    )
    with sessions.begin() as session:
        # Waiting rows first: the expired ones, queued again just now, are not among them.
        waiting = requeue_waiting(session, queued_before=queued_before)
        expired = requeue_expired_leases(session)
        dry_runs = requeue_dry_runs(session, queued_before=queued_before)
    if expired:
        log.warning("requeued %d submission(s) whose worker lease expired", len(expired))
    if waiting:
        log.info("sent %d queued submission(s) to the workers again", len(waiting))
    return [*waiting, *expired, *dry_runs]


class LeaseSweeper:
    """A thread that runs `sweep` every `sweep_interval_seconds`.

    Every grading process runs one; sweeps on several hosts at once requeue each row once.
    """

    def __init__(self, sessions: SessionFactory, settings: Settings) -> None:
        self._sessions = sessions
        self._settings = settings
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="lease-sweeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while not self._stopped.wait(self._settings.sweep_interval_seconds):
            try:
                sweep(self._sessions, self._settings)
            except Exception:
                # A database that is away now is swept on a later round.
                log.exception("lease sweep failed")
