"""How a class's learners move between diagnoses on one exercise, where they stay, and who is
stuck: the instructor's misconception map.

Each learner's attempts, oldest first, are a path through diagnoses: from the start to their
first diagnosis, then from each attempt's diagnosis to the next one's (the same one again is a
move too: the learner stayed). A *stay* is a run of attempts with one diagnosis; it ends when
an attempt has another, or is still going at the learner's latest attempt.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.courses.attempts import Attempt, LearnerAttempts
from graders.report import diagnosis_name

START = "start"
CORRECT = "correct"
# A learner is stuck who has not solved the exercise and either had one diagnosis this many
# times in a row at their latest attempts, or has not bettered their best score for this long.
STUCK_REPEATS = 3
STUCK_IDLE = timedelta(days=1)


@dataclass(frozen=True)
class Move:
    source: str  # START or a diagnosis code
    target: str
    moves: int
    learners: int


@dataclass(frozen=True)
class Stay:
    diagnosis: str
    learners: int
    stays: int
    median_attempts: float  # attempts in one stay
    # From a stay's first attempt to the next diagnosis; None while no stay has ended.
    median_hours: float | None
    still_there: int  # learners whose latest attempt has this diagnosis


@dataclass(frozen=True)
class StuckLearner:
    learner: LearnerAttempts
    reason: str

    @property
    def latest(self) -> Attempt:
        return self.learner.attempts[-1]


@dataclass(frozen=True)
class MisconceptionMap:
    learners: int
    states: list[str]  # START, then the diagnoses in the order learners meet them, CORRECT last
    moves: list[Move]  # most frequent first
    stays: list[Stay]  # in the order of `states`
    stuck: list[StuckLearner]

    def moves_between(self, source: str, target: str) -> Move | None:
        return next((m for m in self.moves if (m.source, m.target) == (source, target)), None)


def _runs(attempts: list[Attempt]) -> list[list[Attempt]]:
    runs: list[list[Attempt]] = []
    for attempt in attempts:
        if runs and runs[-1][0].diagnosis == attempt.diagnosis:
            runs[-1].append(attempt)
        else:
            runs.append([attempt])
    return runs


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600


def _stuck_reason(
    learner: LearnerAttempts, *, now: datetime, repeats: int, idle: timedelta
) -> str | None:
    attempts = learner.attempts
    if any(a.solved for a in attempts):
        return None
    last_run = _runs(attempts)[-1]
    if len(last_run) >= repeats:
        return f"{diagnosis_name(last_run[0].diagnosis)} {len(last_run)} times in a row"
    best = max(a.score for a in attempts)
    reached = next(a for a in attempts if a.score == best)
    if now - reached.at >= idle:
        days = (now - reached.at) / timedelta(days=1)
        since = len(attempts) - attempts.index(reached) - 1
        return (
            f"no better score for {days:.0f} day{'s' if round(days) != 1 else ''}"
            f" ({since} attempt{'s' if since != 1 else ''} since)"
        )
    return None


def misconception_map(
    learners: list[LearnerAttempts],
    *,
    now: datetime,
    repeats: int = STUCK_REPEATS,
    idle: timedelta = STUCK_IDLE,
) -> MisconceptionMap:
    moves: Counter[tuple[str, str]] = Counter()
    movers: dict[tuple[str, str], set[str]] = {}
    positions: dict[str, list[int]] = {}
    run_lengths: dict[str, list[int]] = {}
    run_hours: dict[str, list[float]] = {}
    visitors: dict[str, set[str]] = {}
    still_there: Counter[str] = Counter()
    for learner in learners:
        path = [START] + [a.diagnosis for a in learner.attempts]
        for pair in itertools.pairwise(path):
            moves[pair] += 1
            movers.setdefault(pair, set()).add(learner.key)
        for number, attempt in enumerate(learner.attempts):
            positions.setdefault(attempt.diagnosis, []).append(number)
        runs = _runs(learner.attempts)
        for run, following in zip(runs, [*runs[1:], None], strict=True):
            code = run[0].diagnosis
            run_lengths.setdefault(code, []).append(len(run))
            visitors.setdefault(code, set()).add(learner.key)
            if following is not None:
                run_hours.setdefault(code, []).append(_hours(following[0].at - run[0].at))
        still_there[learner.attempts[-1].diagnosis] += 1

    met = sorted(
        (code for code in positions if code != CORRECT),
        key=lambda code: (statistics.fmean(positions[code]), code),
    )
    states = [START, *met, *([CORRECT] if CORRECT in positions else [])]
    stuck = [
        StuckLearner(learner, reason)
        for learner in learners
        if (reason := _stuck_reason(learner, now=now, repeats=repeats, idle=idle)) is not None
    ]
    return MisconceptionMap(
        learners=len(learners),
        states=states,
        moves=[
            Move(source, target, count, len(movers[(source, target)]))
            for (source, target), count in sorted(
                moves.items(), key=lambda item: (-item[1], states.index(item[0][0]), item[0][1])
            )
        ],
        stays=[
            Stay(
                diagnosis=code,
                learners=len(visitors[code]),
                stays=len(run_lengths[code]),
                median_attempts=statistics.median(run_lengths[code]),
                median_hours=statistics.median(run_hours[code]) if code in run_hours else None,
                still_there=still_there[code],
            )
            for code in states[1:]
        ],
        stuck=stuck,
    )
