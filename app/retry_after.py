"""When a refused client should come back: `Retry-After` from how many are ahead of it and the
rate its line drains at, as measured (docs/operations.md, "Load").

A line (an admission lane, the grading queue) that refuses a client hands it a return time:
the moment the line should have room for it, from how many must leave before it and the
measured drain rate; each later refusal's time is one drained place after the one before, so
that a class refused at once comes back spread out at the rate the line drains, not in one
wave. Up to a second of jitter spreads those given the same second. A client that comes back
early is refused again and told a later time; nothing is stored for it meanwhile. Until the
line has drained anything lately its rate is unknown, and a refused client is told to come
back within a few seconds, by which time it is known.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque

# How far back the drain rate is measured: long enough to hold many completions of a busy
# line, short enough to follow it when it speeds up or slows down.
DRAIN_WINDOW_SECONDS = 10.0
# While the rate is unknown: somewhere from 1 to this many seconds.
UNKNOWN_RATE_RETRY_AFTER_SECONDS = 5
# No client is told to wait longer than this; one told it comes back and is told again.
MAX_RETRY_AFTER_SECONDS = 120
JITTER_SECONDS = 1.0


def drain_per_second(
    count: int, oldest_age_seconds: float | None, window_seconds: float = DRAIN_WINDOW_SECONDS
) -> float | None:
    """Completions a second from `count` of them in the window, the oldest `oldest_age_seconds`
    ago (a line that began draining within the window is measured from its first); None when
    too few to tell."""
    if count < 2 or oldest_age_seconds is None:
        return None
    return count / min(window_seconds, max(1.0, oldest_age_seconds))


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
        oldest = self._completed_at[0] if self._completed_at else None
        return drain_per_second(len(self._completed_at), None if oldest is None else now - oldest)

    def _forget_before(self, moment: float) -> None:
        while self._completed_at and self._completed_at[0] < moment:
            self._completed_at.popleft()


class ReturnSchedule:
    """The return times handed to a line's refused clients, one drained place apart."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._next_at = 0.0  # time.monotonic() of the next free return place
        self._lock = threading.Lock()  # refusals come from request threads and the event loop

    def retry_after_seconds(self, *, ahead: int, per_second: float | None) -> int:
        """Whole seconds until the line should have room for a client with `ahead` clients to
        leave before it, given its drain rate `per_second` (None: unknown); jittered."""
        if per_second is None or per_second <= 0:
            return self._rng.randint(1, UNKNOWN_RATE_RETRY_AFTER_SECONDS)
        now = time.monotonic()
        with self._lock:
            at = max(self._next_at, now + max(1, ahead) / per_second)
            at = min(at, now + MAX_RETRY_AFTER_SECONDS)
            self._next_at = at + 1 / per_second
        seconds = at - now + self._rng.uniform(0, JITTER_SECONDS)
        return max(1, min(MAX_RETRY_AFTER_SECONDS, math.ceil(seconds)))
