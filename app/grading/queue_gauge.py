"""What a web process knows of the grading queue without its database: a lower bound on the
submissions waiting for a grader (queued or being graded) in the whole deployment, and how fast
they leave. Admission control uses it to refuse a submission to a full queue before the request
opens a database session or signs anyone in (app/admission.py).

The intake's exact count (`check_waiting`, app/grading/submissions.py) stays the authority; the
gauge is a fast path that never refuses while there is room. How it stays at or below the truth:

- Its only count is one the intake read exactly, with a ticket taken as that request's
  transaction began (before the database's snapshot): the exits heard by then.
- From that count it takes every exit (graded, error) heard since the ticket and adds no new
  submission. It hears the exits of this process's grading threads (embedded), or every
  worker's over the state channel (Celery on Redis, app/grading/state_channel.py). An exit the
  snapshot already counted and heard after the ticket is taken twice: lower still.
- An exit it cannot hear (a worker's message lost while Redis was away from that worker only; a
  regrade graded by the CLI in a process of its own) would leave it above the truth, so a count
  is believed for `GAUGE_FRESH_SECONDS` only: then the next submission goes to the intake, whose
  count is fresh again. A reconnection of the state channel forgets the count at once (messages
  sent meanwhile are lost). With a broker that is not Redis nothing is heard and the gauge
  knows nothing.
- Several web processes (Celery) each keep their own gauge, from their own intake's counts and
  the exits every one of them hears.

An Idempotency-Key's resend is refused early only when the intake could not have accepted it:
`RefusedKeys`.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from app.models import SubmissionStatus
from app.retry_after import DrainMeter

# How long an intake's count is believed: short, since an exit the gauge did not hear would
# keep it too high that long; long enough that a full queue's flood costs one session a second.
GAUGE_FRESH_SECONDS = 1.0
# session.info keys: the gauge of the sessions' process, and the ticket of this transaction.
WAITING_GAUGE = "waiting_gauge"
GAUGE_TICKET = "waiting_gauge_ticket"
# session.info key: this request's submission was refused by the intake's exact count.
REFUSED_BY_FULL_QUEUE = "refused_by_full_queue"
# Keys remembered as refused; the oldest are forgotten first (then they go to the intake).
MAX_REFUSED_KEYS = 50_000
EXITS = frozenset({SubmissionStatus.GRADED, SubmissionStatus.ERROR})


@dataclass(frozen=True)
class GaugeTicket:
    """The exits heard (in this `epoch` of hearing) when a transaction began, and when."""

    epoch: int
    exits: int
    at: float  # time.monotonic()


class WaitingGauge:
    """A lower bound on the deployment's waiting submissions, for `GAUGE_FRESH_SECONDS` after an
    intake counted them (see the module docstring). Thread-safe: the intake counts in request
    threads, exits are heard on grading threads or the state channel's."""

    def __init__(self, *, hears_exits: bool) -> None:
        self._hears_exits = hears_exits
        self._lock = threading.Lock()
        self._epoch = 0
        self._exits = 0
        self._count: tuple[int, GaugeTicket] | None = None
        self._drained = DrainMeter()

    def ticket(self) -> GaugeTicket:
        with self._lock:
            return GaugeTicket(self._epoch, self._exits, time.monotonic())

    def counted(self, waiting: int, ticket: GaugeTicket) -> None:
        """The intake counted `waiting` exactly, in a transaction that began at `ticket`."""
        with self._lock:
            if ticket.epoch == self._epoch and (
                self._count is None or ticket.at >= self._count[1].at
            ):
                self._count = (waiting, ticket)

    def state_changed(self, submission_id: str, status: SubmissionStatus) -> None:
        """A submission's change, told after its commit (app.grading.queue.StateChanged)."""
        if status in EXITS:
            with self._lock:
                self._exits += 1
                self._drained.record()

    def forget(self) -> None:
        """Exits may have gone unheard (the state channel reconnected): believe no count until
        the intake's next."""
        with self._lock:
            self._epoch += 1
            self._count = None

    def waiting_at_least(self) -> int | None:
        """At least this many wait now; None when the gauge does not know."""
        with self._lock:
            if not self._hears_exits or self._count is None:
                return None
            waiting, ticket = self._count
            if time.monotonic() - ticket.at > GAUGE_FRESH_SECONDS:
                return None
            return max(0, waiting - (self._exits - ticket.exits))

    def drained_per_second(self) -> float | None:
        """Exits a second lately (every worker's that it hears); None when too few to tell."""
        with self._lock:
            return self._drained.per_second()


def install_waiting_gauge(sessions: sessionmaker[Session], gauge: WaitingGauge) -> None:
    """Let the intake's count (`check_waiting`) reach `gauge` from every session of `sessions`,
    with the ticket taken as each transaction begins."""
    sessions.configure(info={WAITING_GAUGE: gauge})

    @event.listens_for(sessions, "after_begin")
    def _take_ticket(session: Session, transaction: SessionTransaction, _: Connection) -> None:
        # Before the transaction's first statement, so before its snapshot; the first one counts.
        session.info.setdefault(GAUGE_TICKET, gauge.ticket())


def report_waiting(session: Session, waiting: int) -> None:
    """Tell the session's gauge (if it has one) the exact count the intake just read."""
    gauge = session.info.get(WAITING_GAUGE)
    ticket = session.info.get(GAUGE_TICKET)
    if isinstance(gauge, WaitingGauge) and isinstance(ticket, GaugeTicket):
        gauge.counted(waiting, ticket)


def credential_of(authorization: str | None, cookie: str | None) -> str:
    """Who sends, as far as a request's headers say before anyone is signed in: a digest of its
    credentials (an API key or token, the session and learner cookies)."""
    sent = f"{authorization or ''}\n{cookie or ''}"
    return hashlib.sha256(sent.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(eq=False)
class KeyedSubmission:
    """A submission request with an Idempotency-Key, while it is in flight."""

    credential: str
    key: str
    overlapped: bool = False  # another with the same key was in flight at the same time
    ended: bool = False


@dataclass
class RefusedKeys:
    """The Idempotency-Keys the intake refused for a full queue, by the credentials that sent
    them, until a request with the key is accepted: a resend of one of them is refused early
    when the queue is still full. Used on the event loop only.

    Exact in one process only (embedded: it is the only one that accepts): the intake looked the
    key up before it counted the queue, so a refusal says that no submission had that key then;
    any later acceptance of the key, whoever sent it, forgets it. A refusal is not remembered when
    another request with the same key was in flight meanwhile (which of the two the database saw
    first is not known here). A credential that changes between resends (a new cookie) goes to
    the intake, as does a key forgotten for room.
    """

    _refused: OrderedDict[str, set[str]] = field(default_factory=OrderedDict)
    _in_flight: dict[str, list[KeyedSubmission]] = field(default_factory=dict)

    def refused_before(self, credential: str, key: str) -> bool:
        return credential in self._refused.get(key, ())

    def began(self, credential: str, key: str) -> KeyedSubmission:
        request = KeyedSubmission(credential, key)
        peers = self._in_flight.setdefault(key, [])
        if peers:
            request.overlapped = True
            for peer in peers:
                peer.overlapped = True
        peers.append(request)
        return request

    def ended(self, request: KeyedSubmission, *, status: int | None, full_queue: bool) -> None:
        """`status` of its answer (None: none was sent); `full_queue`: the intake's exact count
        refused it. Called as its answer starts, after its transaction ended."""
        if request.ended:
            return
        request.ended = True
        peers = self._in_flight[request.key]
        peers.remove(request)
        if not peers:
            del self._in_flight[request.key]
        if status is not None and status < 400:  # committed: the key may be accepted now
            self._refused.pop(request.key, None)
        elif status == 503 and full_queue and not request.overlapped:
            self._refused.setdefault(request.key, set()).add(request.credential)
            self._refused.move_to_end(request.key)
            while len(self._refused) > MAX_REFUSED_KEYS:
                self._refused.popitem(last=False)
