"""`Retry-After` for a full grading queue says when it should have room for the client: from how
many are ahead of it and the drain rate measured from the gradings every worker stored, spread
one drained place apart and jittered (app/retry_after.py). Nothing refused is stored.

The figures are bounded from the test's own rows, never timed: the rate is read from `graded_at`
values the test writes, the window holds them however long the test takes, and the return
schedule's clock stands still, so every refusal of a test is "at once".
"""

from __future__ import annotations

import asyncio
import math
import random
from datetime import timedelta

import pytest
from sqlalchemy import func, select

import app.grading.submissions as submissions_module
from app.admission import WAITING_PER_SLOT, AdmissionLane
from app.db import SessionFactory
from app.grading.submissions import QueueFull, SubmissionLimits, check_waiting
from app.models import Submission, SubmissionStatus, utc_now
from app.retry_after import (
    DRAIN_WINDOW_SECONDS,
    JITTER_SECONDS,
    MAX_RETRY_AFTER_SECONDS,
    MIN_SPAN_SECONDS,
    UNKNOWN_RATE_RETRY_AFTER_SECONDS,
    ReturnSchedule,
    drain_per_second,
)
from tests.app.conftest import EXERCISE

MAX_WAITING = 40
LIMITS = SubmissionLimits(max_waiting=MAX_WAITING)
# The test's gradings lie within the last GRADED_OVER_SECONDS (see rate_bounds).
GRADED_OVER_SECONDS = 4.0


def add_submissions(
    sessions: SessionFactory, count: int, status: SubmissionStatus, *, over_seconds: float = 0.0
) -> None:
    """`count` submissions of `status`; graded ones spread over the last `over_seconds`."""
    now = utc_now()
    with sessions.begin() as session:
        for n in range(count):
            graded = status == SubmissionStatus.GRADED
            session.add(
                Submission(
                    exercise_id=EXERCISE,
                    exercise_version="v-test",
                    learner=f"{status}-{n}",
                    code="pass\n",
                    status=status,
                    attempts=0,
                    graded_at=(
                        now - timedelta(seconds=over_seconds * (n + 1) / count) if graded else None
                    ),
                )
            )


def refusal(sessions: SessionFactory, *, anonymous_practice: bool = False) -> QueueFull:
    with sessions() as session, pytest.raises(QueueFull) as refused:
        check_waiting(session, LIMITS, anonymous_practice=anonymous_practice)
    return refused.value


def schedule_at_once(seed: int) -> ReturnSchedule:
    """A return schedule whose clock stands still: no handed place passes during a test."""
    return ReturnSchedule(random.Random(seed), clock=lambda: 1000.0)


@pytest.fixture(autouse=True)
def fresh_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's refusals are the first this process hands out."""
    monkeypatch.setattr(submissions_module, "QUEUE_RETURNS", schedule_at_once(46))
    monkeypatch.setattr(submissions_module, "DRAIN_WINDOW_SECONDS", 3600.0)


def rate_bounds(graded: int) -> tuple[float, float]:
    """The drain rate the server can measure from `graded` gradings spread over the last
    GRADED_OVER_SECONDS, read any time before the window passes them."""
    return graded / DRAIN_WINDOW_SECONDS, graded / GRADED_OVER_SECONDS


def test_with_nothing_graded_lately_a_refused_client_comes_back_within_seconds(
    sessions: SessionFactory,
) -> None:
    add_submissions(sessions, MAX_WAITING, SubmissionStatus.QUEUED)
    told = {refusal(sessions).retry_after_seconds for _ in range(30)}
    assert told <= set(range(1, UNKNOWN_RATE_RETRY_AFTER_SECONDS + 1))
    assert len(told) > 1, "all told the same second: one wave"


def test_retry_after_grows_with_those_ahead_and_shrinks_with_the_drain_rate(
    sessions: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_submissions(sessions, MAX_WAITING, SubmissionStatus.QUEUED)
    add_submissions(sessions, 8, SubmissionStatus.GRADED, over_seconds=GRADED_OVER_SECONDS)
    slowest, fastest = rate_bounds(8)

    # An API client at a full queue: one grading ahead of it.
    first = refusal(sessions)
    assert math.ceil(1 / fastest) <= first.retry_after_seconds
    assert first.retry_after_seconds <= math.ceil(1 / slowest + JITTER_SECONDS)
    assert f"send it again in {first.retry_after_seconds} s" in first.message

    # Anonymous practice has half the queue: half of it must drain first.
    monkeypatch.setattr(submissions_module, "QUEUE_RETURNS", schedule_at_once(1))
    ahead = MAX_WAITING - MAX_WAITING // 2 + 1
    deep = refusal(sessions, anonymous_practice=True).retry_after_seconds
    assert math.ceil(ahead / fastest) <= deep <= math.ceil(ahead / slowest + JITTER_SECONDS)
    assert deep > first.retry_after_seconds

    # Draining five times faster: the same place comes sooner.
    monkeypatch.setattr(submissions_module, "QUEUE_RETURNS", schedule_at_once(1))
    add_submissions(sessions, 32, SubmissionStatus.GRADED, over_seconds=GRADED_OVER_SECONDS)
    slowest, fastest = rate_bounds(40)
    sooner = refusal(sessions, anonymous_practice=True).retry_after_seconds
    assert math.ceil(ahead / fastest) <= sooner <= math.ceil(ahead / slowest + JITTER_SECONDS)
    assert sooner < deep


def test_a_class_refused_at_once_is_told_to_come_back_spread_at_the_drain_rate(
    sessions: SessionFactory,
) -> None:
    add_submissions(sessions, MAX_WAITING, SubmissionStatus.QUEUED)
    add_submissions(sessions, 8, SubmissionStatus.GRADED, over_seconds=GRADED_OVER_SECONDS)
    slowest, fastest = rate_bounds(8)
    told = [refusal(sessions).retry_after_seconds for _ in range(40)]
    # The k-th refused comes back about when k gradings have drained, not all at once and
    # never after a fixed time that outlasts the queue.
    for k, seconds in enumerate(told, start=1):
        assert math.ceil(k / fastest) <= seconds <= math.ceil(k / slowest + JITTER_SECONDS), k
    assert max(told) <= MAX_RETRY_AFTER_SECONDS
    per_second = [told.count(s) for s in set(told)]
    assert max(per_second) < len(told) / 4, "a quarter of the class told the same second"
    # Nothing refused was stored.
    with sessions() as session:
        waiting = session.scalar(
            select(func.count())
            .select_from(Submission)
            .where(Submission.status == SubmissionStatus.QUEUED)
        )
    assert waiting == MAX_WAITING


def test_an_empty_queue_refuses_no_one(sessions: SessionFactory) -> None:
    add_submissions(sessions, MAX_WAITING - 1, SubmissionStatus.QUEUED)
    with sessions() as session:
        check_waiting(session, LIMITS, anonymous_practice=False)


def test_a_burst_is_measured_from_its_own_completions() -> None:
    # Five gradings in the first tenth of a second of a burst: about 40 a second.
    assert drain_per_second([0.0, 0.025, 0.05, 0.075, 0.1]) == pytest.approx(40.0)
    # The same burst after a quiet spell whose last gradings ended 8 s before it: still 40 (an
    # average over the window read 1 a second and sent a class away while the graders idled).
    assert drain_per_second([0.0, 0.025, 0.05, 0.075, 0.1, 8.1, 8.2, 8.3]) == pytest.approx(40.0)
    # Too few to tell.
    assert drain_per_second([0.0, 0.1]) is None
    assert drain_per_second([0.0, 0.1, 5.0, 5.1]) is None
    # A line that drained 20 in one second and then ran out of work a second ago: it drains
    # 19 a second when it has work, not 9.5.
    assert drain_per_second([1.0 + n / 19 for n in range(20)]) == pytest.approx(19.0)
    # A run that left the window is forgotten: unknown, told to come back within seconds.
    assert drain_per_second([]) is None


def test_returns_handed_at_a_slow_rate_do_not_push_later_ones_out() -> None:
    schedule = schedule_at_once(46)
    slow = [schedule.retry_after_seconds(ahead=1, per_second=1.0) for _ in range(30)]
    assert 30 <= slow[-1] <= 30 + math.ceil(JITTER_SECONDS)  # one place a second
    # The line turns out to drain 30 a second: the next refused come back in the second before
    # the slow ones' first return, one drained place apart, not after their 30 s.
    faster = [schedule.retry_after_seconds(ahead=1, per_second=30.0) for _ in range(29)]
    for k, seconds in enumerate(faster, start=1):
        assert math.ceil(k / 30) <= seconds <= math.ceil(k / 30 + JITTER_SECONDS), k
    # The gap before the slow ones' first return (1 s) is full: the next goes between theirs.
    after_gap = schedule.retry_after_seconds(ahead=1, per_second=30.0)
    assert 2 <= after_gap <= 2 + math.ceil(JITTER_SECONDS)


def test_a_lane_measures_its_rate_only_while_it_has_a_line() -> None:
    """A quiet spell's requests (each finding a free slot) say nothing of the lane's rate: a
    crowd arriving after them is told to come back within seconds, not after minutes (read
    as the spell's few a second, 30 refused were told up to 10 s; a class of 1,000, 120 s)."""

    async def crowd_after_a_quiet_spell() -> tuple[list[int], list[int]]:
        lane = AdmissionLane(capacity=1, wait_seconds=30)
        for _ in range(10):  # the quiet spell: one request at a time, a few a second
            assert await lane.acquire()
            lane.release()
            await asyncio.sleep(0.3)
        assert await lane.acquire()  # the crowd: one holds the slot, a full line waits
        line = [asyncio.ensure_future(lane.acquire()) for _ in range(WAITING_PER_SLOT)]
        await asyncio.sleep(0)
        assert not await lane.acquire()
        unknown = [lane.retry_after_seconds() for _ in range(30)]
        for waiting in line:  # the line drains: each slot handed to the next waiting
            lane.release()
            assert await waiting
        line = [asyncio.ensure_future(lane.acquire()) for _ in range(WAITING_PER_SLOT)]
        await asyncio.sleep(0)
        known = [lane.retry_after_seconds() for _ in range(30)]
        for waiting in line:
            waiting.cancel()
        return unknown, known

    unknown, known = asyncio.run(crowd_after_a_quiet_spell())
    assert set(unknown) <= set(range(1, UNKNOWN_RATE_RETRY_AFTER_SECONDS + 1))
    # The line drained as fast as this test handed slots over (a few places a millisecond,
    # read as at most one per MIN_SPAN_SECONDS / (WAITING_PER_SLOT - 1)): 30 more come back
    # within seconds.
    per_second = (WAITING_PER_SLOT - 1) / MIN_SPAN_SECONDS
    assert max(known) <= math.ceil(31 / per_second + JITTER_SECONDS)
