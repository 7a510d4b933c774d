"""Item analysis of one exercise in a course, as PrairieLearn's statistics have it: the score by
attempt number, the first, last and best scores' histograms, and the time from first open to
solved. Scores here are as graded (before late penalties and overrides): they describe the
exercise, not the gradebook.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import timedelta

from app.courses.attempts import LearnerAttempts
from app.courses.gradebook import SCORE_BUCKETS, score_bucket

# Attempts from this number on are one row: few learners make them, each alone says little.
LAST_ATTEMPT_ROW = 10
SOLVE_TIME_BUCKETS: tuple[tuple[str, timedelta], ...] = (
    ("under 10 min", timedelta(minutes=10)),
    ("10-30 min", timedelta(minutes=30)),
    ("30 min-2 h", timedelta(hours=2)),
    ("2 h-1 day", timedelta(days=1)),
    ("over a day", timedelta.max),
)


@dataclass(frozen=True)
class AttemptRow:
    label: str  # "1", "2", ... or "10+"
    attempts: int
    learners: int
    mean_percent: float
    solved_percent: float  # of these attempts, the share with full marks


@dataclass(frozen=True)
class CheckRate:
    """How often one check passes: the level at which an instructor sees what to reteach."""

    check_id: str
    attempts: int  # graded attempts that ran it
    passed_percent: float  # of those attempts
    failing_now: int  # learners whose latest attempt fails it


@dataclass(frozen=True)
class ItemAnalysis:
    learners: int
    by_attempt: list[AttemptRow]
    first: list[tuple[str, int]]  # learners by their first attempt's score, in SCORE_BUCKETS
    last: list[tuple[str, int]]
    best: list[tuple[str, int]]
    solve_times: list[tuple[str, int]]  # solvers by time from first open to first solve
    solve_hours: list[float]
    # Solvers whose first open was not recorded (before it was): timed from their first attempt.
    timed_from_first_attempt: int
    checks: list[CheckRate]  # the least passed first

    @property
    def median_solve_hours(self) -> float | None:
        return statistics.median(self.solve_hours) if self.solve_hours else None


def _histogram(percents: list[float]) -> list[tuple[str, int]]:
    counts = [0] * len(SCORE_BUCKETS)
    for percent in percents:
        counts[score_bucket(percent, 100.0)] += 1
    return list(zip(SCORE_BUCKETS, counts, strict=True))


def item_analysis(learners: list[LearnerAttempts]) -> ItemAnalysis:
    rows: dict[int, list[tuple[str, float, bool]]] = {}
    for learner in learners:
        for number, attempt in enumerate(learner.attempts, start=1):
            row = min(number, LAST_ATTEMPT_ROW)
            rows.setdefault(row, []).append((learner.key, attempt.percent, attempt.solved))
    by_attempt = [
        AttemptRow(
            label=f"{number}+" if number == LAST_ATTEMPT_ROW else str(number),
            attempts=len(made),
            learners=len({key for key, _, _ in made}),
            mean_percent=statistics.fmean(percent for _, percent, _ in made),
            solved_percent=100 * sum(solved for _, _, solved in made) / len(made),
        )
        for number, made in sorted(rows.items())
    ]

    runs: dict[str, list[bool]] = {}
    failing_now: dict[str, int] = {}
    for learner in learners:
        for attempt in learner.attempts:
            for check_id, passed in attempt.checks:
                runs.setdefault(check_id, []).append(passed)
        for check_id, passed in learner.attempts[-1].checks:
            failing_now[check_id] = failing_now.get(check_id, 0) + (not passed)
    checks = sorted(
        (
            CheckRate(
                check_id, len(passes), 100 * sum(passes) / len(passes), failing_now.get(check_id, 0)
            )
            for check_id, passes in runs.items()
        ),
        key=lambda rate: (rate.passed_percent, -rate.attempts, rate.check_id),
    )

    solve_times = [0] * len(SOLVE_TIME_BUCKETS)
    solve_hours = []
    timed_from_first_attempt = 0
    for learner in learners:
        solve = learner.first_solve
        if solve is None:
            continue
        start = learner.opened_at
        if start is None or start > learner.attempts[0].at:
            start = learner.attempts[0].at
            timed_from_first_attempt += learner.opened_at is None
        took = solve.at - start
        solve_hours.append(took.total_seconds() / 3600)
        solve_times[next(i for i, (_, upper) in enumerate(SOLVE_TIME_BUCKETS) if took < upper)] += 1

    return ItemAnalysis(
        learners=len(learners),
        by_attempt=by_attempt,
        first=_histogram([learner.attempts[0].percent for learner in learners]),
        last=_histogram([learner.attempts[-1].percent for learner in learners]),
        best=_histogram([max(a.percent for a in learner.attempts) for learner in learners]),
        solve_times=[
            (label, count)
            for (label, _), count in zip(SOLVE_TIME_BUCKETS, solve_times, strict=True)
        ],
        solve_hours=solve_hours,
        timed_from_first_attempt=timed_from_first_attempt,
        checks=checks,
    )
