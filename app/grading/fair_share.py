"""Which waiting submission a free grading thread takes next: each owner gets its share.

An owner is whoever the submission counts against: a signed-in user, a learner named by an API
key's client (an LMS submits a whole class under one key, and a class is many owners; the key
as a whole is bounded by its rate limit), the client address of anonymous practice.
One owner's submissions, however slow, must not hold every sandbox slot while others wait. So
an owner has at most `max_per_owner` runs in progress (all the slots but one,
app/grading/queue.owner_share: a newcomer then finds a slot kept for it, or with one slot waits
for one turn at most), and the next submission taken is the one whose owner has the
fewest runs in progress, then the least slot time lately (a run's whole wall time counts:
sleeping holds a slot as computing does), then the oldest.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, case, literal, select

from app.db import SessionFactory
from app.models import Submission

log = logging.getLogger(__name__)

# Slot time used is forgotten by half every this long: a burst an hour ago weighs nothing now.
USAGE_HALF_LIFE_SECONDS = 60.0
# Less than this is no use at all: owners who used this little are taken oldest first.
USAGE_IGNORED_BELOW_SECONDS = 0.01


class OwnerKind(enum.StrEnum):
    USER = "user"
    API_KEY_LEARNER = "api-key"  # a learner as an API key's client names them
    ADDRESS = "address"  # anonymous practice
    LEARNER = "learner"  # none of the above (rows made by hand, by tests)


# The owner a submission's runs count against, as SQL: the in-process share reads it, and a
# Celery worker's claim groups by it (app/grading/fair_claim.py).
OWNER: ColumnElement[str] = case(
    (Submission.user_id.is_not(None), literal(f"{OwnerKind.USER}:") + Submission.user_id),
    (
        Submission.api_key_id.is_not(None),
        literal(f"{OwnerKind.API_KEY_LEARNER}:")
        + Submission.api_key_id
        + literal(":")
        + Submission.learner,
    ),
    (
        Submission.client_address.is_not(None),
        literal(f"{OwnerKind.ADDRESS}:") + Submission.client_address,
    ),
    else_=literal(f"{OwnerKind.LEARNER}:") + Submission.learner,
)


def submission_owners(sessions: SessionFactory, submission_ids: Iterable[str]) -> dict[str, str]:
    """The owner of each of these submissions that exists."""
    with sessions() as session:
        rows = session.execute(
            select(Submission.id, OWNER).where(Submission.id.in_(list(submission_ids)))
        ).all()
    return {submission_id: owner for submission_id, owner in rows}


@dataclass(frozen=True)
class Taken:
    """A submission handed to a thread, and the owner whose share it uses until `done`."""

    submission_id: str
    owner: str
    taken_at: float  # time.monotonic()


@dataclass
class _Waiting:
    order: int
    submission_id: str
    owner: str | None  # looked up when first needed


class FairShare:
    """The submissions this process was handed and has not yet taken, handed out fairly.

    `owners_of(ids)` names the owners of submissions (a database read, made outside the
    lock); a submission it does not know is its own owner.
    """

    def __init__(
        self,
        owners_of: Callable[[list[str]], dict[str, str]],
        *,
        max_per_owner: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._owners_of = owners_of
        self._max_per_owner = max_per_owner
        self._clock = clock
        self._lock = threading.Lock()
        self._order = itertools.count()
        self._waiting: list[_Waiting] = []
        self._running: Counter[str] = Counter()
        # owner -> (slot seconds used, decayed to the time given)
        self._usage: dict[str, tuple[float, float]] = {}

    def add(self, submission_id: str) -> None:
        with self._lock:
            self._waiting.append(_Waiting(next(self._order), submission_id, None))

    def clear(self) -> None:
        """Forget what waits (it stays queued in the database, for the next start's sweep)."""
        with self._lock:
            self._waiting.clear()

    def take(self) -> Taken | None:
        """The next submission to grade, or None when nothing waits that may run now."""
        with self._lock:
            unknown = [w.submission_id for w in self._waiting if w.owner is None]
        try:
            found = self._owners_of(unknown) if unknown else {}
        except Exception:
            # The database away: each is its own owner (its grading will wait for it anyway).
            log.exception("could not read the owners of waiting submissions")
            found = {}
        with self._lock:
            # Only those asked about: one added during the read is looked up by the next take
            # (its add is followed by one), not made its own owner and so let past the share.
            asked = set(unknown)
            for waiting in self._waiting:
                if waiting.owner is None and waiting.submission_id in asked:
                    waiting.owner = found.get(waiting.submission_id, waiting.submission_id)
            now = self._clock()
            eligible = [
                w
                for w in self._waiting
                if w.owner is not None and self._running[w.owner] < self._max_per_owner
            ]
            if not eligible:
                return None
            chosen = min(
                eligible,
                key=lambda w: (
                    self._running[w.owner or ""],
                    self._used(w.owner or "", now),
                    w.order,
                ),
            )
            self._waiting.remove(chosen)
            assert chosen.owner is not None
            self._running[chosen.owner] += 1
            return Taken(chosen.submission_id, chosen.owner, now)

    def done(self, taken: Taken) -> None:
        """The run of `taken` ended: its slot time counts against its owner."""
        with self._lock:
            now = self._clock()
            self._running[taken.owner] -= 1
            if self._running[taken.owner] <= 0:
                del self._running[taken.owner]
            self._usage[taken.owner] = (self._used(taken.owner, now) + now - taken.taken_at, now)
            # Owners whose use has faded are forgotten, so the table stays small.
            faded = [o for o in self._usage if not self._used(o, now) and o != taken.owner]
            for owner in faded:
                del self._usage[owner]

    def _used(self, owner: str, now: float) -> float:
        used, as_of = self._usage.get(owner, (0.0, now))
        faded = float(used * 0.5 ** ((now - as_of) / USAGE_HALF_LIFE_SECONDS))
        return faded if faded >= USAGE_IGNORED_BELOW_SECONDS else 0.0
