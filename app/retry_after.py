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

The rate is read from the completions themselves, the first of a burst included: a burst's
first tenth of a second holds a few gradings, and a rate floored at a second's span would read
35 a second as 3 and send a class away for two minutes while the graders sat idle. A client
told too early costs one more refusal; one told too late leaves a grader idle.
"""

from __future__ import annotations

import bisect
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable

# How far back the drain rate is measured: long enough to hold many completions of a busy
# line, short enough to follow it when it speeds up or slows down.
DRAIN_WINDOW_SECONDS = 10.0
# While the rate is unknown: somewhere from 1 to this many seconds.
UNKNOWN_RATE_RETRY_AFTER_SECONDS = 5
# No client is told to wait longer than this; one told it comes back and is told again.
MAX_RETRY_AFTER_SECONDS = 120
JITTER_SECONDS = 1.0
# A rate is read from at least this many completions, spread over at least this long.
MIN_COMPLETIONS = 3
MIN_SPAN_SECONDS = 0.05


def drain_per_second(
    count: int, oldest_age_seconds: float | None, newest_age_seconds: float | None
) -> float | None:
    """Completions a second from `count` of them in the window, the oldest
    `oldest_age_seconds` ago and the newest `newest_age_seconds` ago; None when too few to tell.

    The slower of two readings: the rate between the first and the last completion (a burst
    measured from its first), and the count over the time since the first (a line that stopped
    draining slows down as the seconds pass)."""
    if count < MIN_COMPLETIONS or oldest_age_seconds is None or newest_age_seconds is None:
        return None
    while_draining = (count - 1) / max(MIN_SPAN_SECONDS, oldest_age_seconds - newest_age_seconds)
    since_first = count / max(MIN_SPAN_SECONDS, oldest_age_seconds)
    return min(while_draining, since_first)


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
        if not self._completed_at:
            return None
        return drain_per_second(
            len(self._completed_at), now - self._completed_at[0], now - self._completed_at[-1]
        )

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
