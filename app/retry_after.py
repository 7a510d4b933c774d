"""When a refused client should come back: `Retry-After` from how many are ahead of it and the
rate its line drains at, as measured (docs/operations.md, "Load").

A line (an admission lane, the grading queue) that refuses a client hands it a return time:
the moment the line should have room for it, from how many must leave before it (those in the
line beyond its room, and the refused clients already told to come back before it) and the
measured drain rate; so a class refused at once comes back spread out at the rate the line
drains, not in one wave. Up to a second of jitter spreads those given the same second. A
client that comes back early is refused again and told a later time; nothing is stored for it
meanwhile. Until the line has drained a few lately its rate is unknown, and a refused client is
told to come back within a few seconds, by which time it is known.

The rate is the line's rate while it has work, never averaged over idle seconds: a class
arriving after a quiet spell, the spell's few completions read as the line's rate, was sent
away for two minutes while the graders sat idle. A client told too early costs one more
refusal; one told too late leaves a grader idle.
"""

from __future__ import annotations

import bisect
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

# How far back the drain rate is measured: long enough to hold many completions of a busy
# line, short enough to follow it when it speeds up or slows down.
DRAIN_WINDOW_SECONDS = 10.0
# While the rate is unknown: somewhere from 1 to this many seconds.
UNKNOWN_RATE_RETRY_AFTER_SECONDS = 5
# No client is told to wait longer than this; one told it comes back and is told again.
MAX_RETRY_AFTER_SECONDS = 120
JITTER_SECONDS = 1.0
# A rate is read from a run of MIN_COMPLETIONS to MAX_RUN completions, spread over at least
# MIN_SPAN_SECONDS, with no gap longer than MAX_GAP_SECONDS between two of them.
MIN_COMPLETIONS = 3
MAX_RUN = 50
MIN_SPAN_SECONDS = 0.05
MAX_GAP_SECONDS = 2.0


def drain_per_second(ages_seconds: Sequence[float]) -> float | None:
    """Completions a second, from how long ago each recent one was (any order); None when too few
    to tell.

    Read from the latest run of completions, up to MAX_RUN of them, none more than MAX_GAP_SECONDS
    after the one before, from its first to its last: a line idle before a burst drains at the
    burst's rate, not at its average over the idle seconds. The time since the last is not
    counted: a line whose work ran out is not slow (nor is one refusing now, which has work);
    a line that stopped draining with work is forgotten as its run leaves the window, and is
    then unknown."""
    newest_first = sorted(ages_seconds)[:MAX_RUN]
    run = 1
    while run < len(newest_first) and newest_first[run] - newest_first[run - 1] <= MAX_GAP_SECONDS:
        run += 1
    if run < MIN_COMPLETIONS:
        return None
    return (run - 1) / max(MIN_SPAN_SECONDS, newest_first[run - 1] - newest_first[0])


class DrainMeter:
    """Completions of a line in this process over the last `DRAIN_WINDOW_SECONDS`."""

    def __init__(self) -> None:
        self._completed_at: deque[float] = deque()

    def record(self) -> None:
        now = time.monotonic()
        self._completed_at.append(now)
        self._forget_before(now - DRAIN_WINDOW_SECONDS)

    def per_second(self) -> float | None:
        now = time.monotonic()
        self._forget_before(now - DRAIN_WINDOW_SECONDS)
        return drain_per_second([now - at for at in self._completed_at])

    def _forget_before(self, moment: float) -> None:
        while self._completed_at and self._completed_at[0] < moment:
            self._completed_at.popleft()


class ReturnSchedule:
    """The return times handed to a line's refused clients and not yet come. A new one takes the
    first place, at the rate measured now, that no earlier client is told: a rate that rose since
    earlier refusals fills the time before their slower places instead of queueing after them."""

    def __init__(
        self, rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rng = rng or random.Random()
        self._clock = clock
        self._return_at: list[float] = []  # time.monotonic() of each handed return, sorted
        self._lock = threading.Lock()  # refusals come from request threads and the event loop

    def retry_after_seconds(self, *, ahead: int, per_second: float | None) -> int:
        """Whole seconds until the line should have room for a client with `ahead` clients to
        leave before it, given its drain rate `per_second` (None: unknown); jittered."""
        if per_second is None or per_second <= 0:
            return self._rng.randint(1, UNKNOWN_RATE_RETRY_AFTER_SECONDS)
        now = self._clock()
        with self._lock:
            del self._return_at[: bisect.bisect_right(self._return_at, now)]
            # Those told to come back before it leave before it too: the first k such that
            # the k-th told comes after the place that k of them and `ahead` make.
            told_before = 0
            while (
                told_before < len(self._return_at)
                and self._return_at[told_before] <= now + (max(1, ahead) + told_before) / per_second
            ):
                told_before += 1
            at = min(
                now + (max(1, ahead) + told_before) / per_second, now + MAX_RETRY_AFTER_SECONDS
            )
            bisect.insort(self._return_at, at)
        seconds = at - now + self._rng.uniform(0, JITTER_SECONDS)
        return max(1, min(MAX_RETRY_AFTER_SECONDS, math.ceil(seconds)))
