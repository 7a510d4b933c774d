"""The outbox: messages to other systems, written in the transaction of the change they
report, and delivered afterwards with retries and backoff, by every host that runs it.

A kind of delivery is one function registered with `register_delivery_kind`: it gets the
session factory (to read what it needs in short transactions of its own: a platform's URLs,
the tool's signing key), the settings (what may be reached, the key that unseals the tool's
signing key) and the message's payload, and either returns (delivered), raises
`PermanentFailure` (recorded as failed, never retried: the receiver refused for good), raises
`DeliveryDeferred` (not yet: it waits on another delivery; tried again after the wait it names,
which is neither an attempt nor a failure) or raises anything else (tried again after a wait
that doubles, up to `outbox_max_attempts`).
LTI grade passback and webhooks are kinds; `app.reactions` registers them, and what a stored
grade triggers, in every process that stores grades or delivers. A change that must be
reported calls `add_to_outbox(session, kind, payload)`; the message exists only if that
transaction commits, and the delivery loop is woken then.

Deliveries are at least once: a host that dies mid-delivery leaves the claim to expire and
another tries again, so a kind must be idempotent at the receiver (a score with its
timestamp, a webhook with its message id).
"""

from __future__ import annotations

import enum
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.db import SessionFactory, on_commit
from app.models import OutboxMessage, OutboxStatus, Submission, utc_now
from app.operations import OUTBOX_DELIVERY_FAILURES
from app.settings import Settings

log = logging.getLogger(__name__)

Deliver = Callable[[SessionFactory, Settings, dict[str, Any]], None]


class PermanentFailure(Exception):
    """The receiver refused the message for good (a 4xx that retrying cannot change)."""


class DeliveryDeferred(Exception):
    """The message cannot go yet: it waits on another delivery (one making the LMS line item
    it must go to). Tried again after `retry_after_seconds`; not an attempt, not a failure."""

    def __init__(self, reason: str, *, retry_after_seconds: float) -> None:
        super().__init__(reason)
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True)
class DeliveryKind:
    name: str
    deliver: Deliver


DELIVERY_KINDS: dict[str, DeliveryKind] = {}


def register_delivery_kind(name: str, deliver: Deliver) -> None:
    """Deliver messages of kind `name` with `deliver`."""
    if name in DELIVERY_KINDS:
        raise ValueError(f"outbox kind {name!r} is registered twice")
    DELIVERY_KINDS[name] = DeliveryKind(name, deliver)


class NothingRegistered(RuntimeError):
    """This process registered no reactions (app.reactions.install_reactions was not called):
    what it stores or delivers would be lost without a word."""


# session.info key: this transaction added outbox messages (wake the loop once it commits).
_OUTBOX_WRITTEN = "outbox_written"


def add_to_outbox(session: Session, kind: str, payload: dict[str, Any]) -> OutboxMessage:
    """Deliver `payload` as `kind` once this transaction commits. Flushes, never commits."""
    if kind not in DELIVERY_KINDS:
        known = ", ".join(sorted(DELIVERY_KINDS)) or "none"
        raise ValueError(f"unknown outbox kind {kind!r}; registered: {known}")
    message = OutboxMessage(kind=kind, payload=payload)
    session.add(message)
    session.flush()
    session.info[_OUTBOX_WRITTEN] = True
    return message


class ScoreChange(enum.StrEnum):
    """What changed a submission's score, as the outbox's listeners hear of it."""

    GRADED = "graded"  # a grade was stored, by whichever process graded it
    OVERRIDDEN = "overridden"  # an instructor set or removed an override
    EXTENDED = "extended"  # an extension moved the learner's due date (late penalties)


# What a score change makes the outbox send: each listener adds the messages it needs (the LTI
# score of a launched submission, a course's webhooks), in the transaction of the change.
ScoreListener = Callable[[Session, Submission], None]
SCORE_LISTENERS: dict[ScoreChange, list[ScoreListener]] = {change: [] for change in ScoreChange}


def register_score_listener(change: ScoreChange, listener: ScoreListener) -> None:
    """Call `listener(session, submission)` in the transaction of each such change."""
    SCORE_LISTENERS[change].append(listener)


def report_score_change(session: Session, change: ScoreChange, submission_id: str) -> None:
    listeners = SCORE_LISTENERS[change]
    if not listeners:
        raise NothingRegistered(
            f"a score was {change} in a process with nothing registered to react to it "
            "(call app.reactions.install_reactions() when the process starts)"
        )
    # Loaded once for every listener, in the transaction that holds SQLite's write lock.
    submission = session.get(Submission, submission_id)
    if submission is None:
        return
    for listener in listeners:
        listener(session, submission)


@dataclass(frozen=True)
class Claimed:
    id: int
    kind: str
    payload: dict[str, Any]
    attempt: int


def claim_due(session: Session, *, claim_timeout_seconds: float) -> Claimed | None:
    """Take the oldest due message for delivery: its next attempt moves past the claim timeout,
    so no other host takes it meanwhile, and one that died leaves it to be tried again."""
    now = utc_now()
    due_id = session.scalars(
        select(OutboxMessage.id)
        .where(OutboxMessage.status == OutboxStatus.PENDING, OutboxMessage.next_attempt_at <= now)
        .order_by(OutboxMessage.next_attempt_at, OutboxMessage.id)
        .limit(1)
    ).first()
    if due_id is None:
        return None
    row = session.execute(
        update(OutboxMessage)
        .where(
            OutboxMessage.id == due_id,
            OutboxMessage.status == OutboxStatus.PENDING,
            OutboxMessage.next_attempt_at <= now,
        )
        .values(
            attempts=OutboxMessage.attempts + 1,
            next_attempt_at=now + timedelta(seconds=claim_timeout_seconds),
        )
        .returning(OutboxMessage.kind, OutboxMessage.payload, OutboxMessage.attempts)
        .execution_options(synchronize_session=False)
    ).one_or_none()
    if row is None:  # another host claimed it between the two statements
        return None
    return Claimed(due_id, row.kind, row.payload, row.attempts)


def retry_delay_seconds(attempt: int, settings: Settings) -> float:
    """Exponential backoff with jitter (so that many failed deliveries do not retry at once)."""
    delay = min(
        settings.outbox_retry_base_seconds * 2 ** (attempt - 1), settings.outbox_retry_max_seconds
    )
    return float(delay * random.uniform(0.8, 1.2))


def _record(session: Session, claimed: Claimed, **values: object) -> None:
    # Fenced on the attempt: a claim that expired and was taken again is not overwritten.
    session.execute(
        update(OutboxMessage)
        .where(OutboxMessage.id == claimed.id, OutboxMessage.attempts == claimed.attempt)
        .values(**values)
        .execution_options(synchronize_session=False)
    )


def deliver_one(sessions: SessionFactory, settings: Settings) -> bool:
    """Deliver the oldest due message, if any; False when none was due."""
    with sessions.begin() as session:
        claimed = claim_due(session, claim_timeout_seconds=settings.outbox_claim_timeout_seconds)
    if claimed is None:
        return False
    kind = DELIVERY_KINDS.get(claimed.kind)
    try:
        if kind is None:
            raise PermanentFailure(f"no delivery kind {claimed.kind!r} is registered")
        kind.deliver(sessions, settings, claimed.payload)
    except DeliveryDeferred as exc:
        log.info(
            "outbox %d (%s): not yet, again in %.1f s: %s",
            claimed.id,
            claimed.kind,
            exc.retry_after_seconds,
            exc,
        )
        with sessions.begin() as session:
            # The claim is given back uncounted. Fenced on the attempt as ever; a host whose
            # claim lapsed and that finishes later may then still record its own outcome,
            # which is true of the message all the same.
            _record(
                session,
                claimed,
                attempts=claimed.attempt - 1,
                next_attempt_at=utc_now() + timedelta(seconds=exc.retry_after_seconds),
                last_error=f"waiting: {exc}"[:2000],
            )
        return True
    except PermanentFailure as exc:
        OUTBOX_DELIVERY_FAILURES.labels(claimed.kind).inc()
        log.warning("outbox %d (%s): refused for good: %s", claimed.id, claimed.kind, exc)
        with sessions.begin() as session:
            _record(session, claimed, status=OutboxStatus.FAILED, last_error=str(exc)[:2000])
        return True
    except Exception as exc:
        OUTBOX_DELIVERY_FAILURES.labels(claimed.kind).inc()
        error = f"{type(exc).__name__}: {exc}"[:2000]
        with sessions.begin() as session:
            if claimed.attempt >= settings.outbox_max_attempts:
                log.warning(
                    "outbox %d (%s): failed %d times, giving up: %s",
                    claimed.id,
                    claimed.kind,
                    claimed.attempt,
                    error,
                )
                _record(session, claimed, status=OutboxStatus.FAILED, last_error=error)
            else:
                delay = retry_delay_seconds(claimed.attempt, settings)
                log.info(
                    "outbox %d (%s): attempt %d failed, again in %.1f s: %s",
                    claimed.id,
                    claimed.kind,
                    claimed.attempt,
                    delay,
                    error,
                )
                _record(
                    session,
                    claimed,
                    next_attempt_at=utc_now() + timedelta(seconds=delay),
                    last_error=error,
                )
        return True
    with sessions.begin() as session:
        _record(
            session, claimed, status=OutboxStatus.DELIVERED, delivered_at=utc_now(), last_error=None
        )
    return True


def retry_outbox_message(session: Session, message: OutboxMessage) -> None:
    """Deliver a failed message again, from its first attempt, once this transaction commits."""
    message.status = OutboxStatus.PENDING
    message.attempts = 0
    message.next_attempt_at = utc_now()
    session.flush()
    session.info[_OUTBOX_WRITTEN] = True


def next_due_in_seconds(session: Session) -> float | None:
    """How long until the next pending message is due; None when none is pending."""
    next_at = session.scalars(
        select(OutboxMessage.next_attempt_at)
        .where(OutboxMessage.status == OutboxStatus.PENDING)
        .order_by(OutboxMessage.next_attempt_at)
        .limit(1)
    ).first()
    if next_at is None:
        return None
    return max(0.0, (next_at - utc_now()).total_seconds())


class OutboxDelivery:
    """A thread that delivers due messages, sleeping until the next is due or a commit that
    wrote one wakes it."""

    # Even when woken by nobody (a message written by another host), look this often.
    POLL_SECONDS = 30.0

    def __init__(self, sessions: SessionFactory, settings: Settings) -> None:
        self._sessions = sessions
        self._settings = settings
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

        self.wake_after_commits_of(sessions)

    def wake_after_commits_of(self, sessions: SessionFactory) -> None:
        """Wake on the commits of `sessions` too (the requests', beside its own engine's)."""
        on_commit(sessions, _OUTBOX_WRITTEN, lambda _written: self._wake.set())

    def start(self) -> None:
        """Start delivering; refused with NothingRegistered when no kind is registered."""
        if not DELIVERY_KINDS:
            raise NothingRegistered(
                "the outbox has no delivery kind registered: every message would fail "
                "(call app.reactions.install_reactions() when the process starts)"
            )
        self._thread = threading.Thread(target=self._run, name="outbox", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish the delivery in progress; pending ones stay in the database."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                while not self._stopping.is_set() and deliver_one(self._sessions, self._settings):
                    pass
                with self._sessions() as session:
                    wait = next_due_in_seconds(session)
            except Exception:
                log.exception("outbox: delivery loop failed; trying again shortly")
                wait = 5.0
            self._wake.wait(self.POLL_SECONDS if wait is None else min(wait, self.POLL_SECONDS))
            self._wake.clear()
