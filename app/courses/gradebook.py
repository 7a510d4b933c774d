"""Scores under a course's policies: the gradebook, its CSV and JSON, per-exercise statistics.

One idea over 400 lines: scores under a course's policies, in each form they are read.

What counts of a learner's submissions is app/courses/counted.py's one rule.
"""

from __future__ import annotations

import csv
import io
import statistics
import unicodedata
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.courses.counted import (
    AssumedOverrides,
    Cell,
    Standing,
    is_solved,
    is_started,
    score_cell,
    standing_words,
    submission_standing,
)
from app.courses.membership import (
    AssignedExercise,
    NotFound,
    assignment_of,
    assignments_of,
    extensions_of,
    members,
)
from app.models import (
    Assignment,
    Course,
    CourseRole,
    LatePolicy,
    ScoringPolicy,
    Submission,
    SubmissionStatus,
    User,
)
from app.submission_history import submissions_of
from graders.exercise import Exercise
from graders.exercises import UnknownExercise, get_exercise

SORTS = ("name", "email", "total")
FILTERS = {
    "all": "Everyone",
    "incomplete": "Not solved everything",
    "not-started": "Not started (nothing sent, or only the starter)",
    "late": "Counted a late submission",
    "overridden": "Has an override",
}


@dataclass(frozen=True)
class Progress:
    """A learner's standing over a unit: "2 of 5 solved, 27/50 points"."""

    solved: int
    exercises: int
    points: float
    max_points: float


def progress_of(cells: list[Cell]) -> Progress:
    return Progress(
        solved=sum(1 for cell in cells if cell.state == "solved"),
        exercises=len(cells),
        points=round(sum(cell.score or 0.0 for cell in cells), 4),
        max_points=sum(cell.max_score for cell in cells),
    )


@dataclass(frozen=True)
class LearnerRow:
    """A learner in the gradebook: an enrolled user, or a learner id sent over the API."""

    key: str
    name: str
    email: str | None
    user_id: str | None
    cells: list[Cell]

    @property
    def total(self) -> float:
        return round(sum(cell.score or 0.0 for cell in self.cells), 4)

    @property
    def max_total(self) -> float:
        return sum(cell.max_score for cell in self.cells)


def _course_submissions(session: Session, course_id: str) -> list[Submission]:
    return list(
        session.scalars(
            select(Submission)
            .where(Submission.course_id == course_id)
            .order_by(Submission.created_at)
        )
    )


def learner_rows(
    session: Session, course: Course, exercises: list[AssignedExercise]
) -> list[LearnerRow]:
    """Every enrolled learner, and every API learner id with submissions in the course."""
    by_learner: dict[str, list[Submission]] = {}
    for submission in _course_submissions(session, course.id):
        key = f"user:{submission.user_id}" if submission.user_id else f"api:{submission.learner}"
        by_learner.setdefault(key, []).append(submission)

    people: list[tuple[str, str, str | None, str | None]] = [
        (f"user:{user.id}", user.name, user.email, user.id)
        for user in members(session, course.id, CourseRole.LEARNER)
    ]
    instructors = {f"user:{u.id}" for u in members(session, course.id, CourseRole.INSTRUCTOR)}
    enrolled = {key for key, *_ in people}
    for key in sorted(by_learner):
        if key in enrolled or key in instructors:
            continue
        if key.startswith("api:"):
            people.append((key, key[4:], None, None))
        else:
            # A user who submitted and then left the course: their scores stay visible.
            user = session.get(User, key[5:])
            if user is not None:
                people.append((key, f"{user.name} (left)", user.email, user.id))

    extensions = extensions_of(session, course.id)
    rows = []
    for key, name, email, user_id in people:
        mine = by_learner.get(key, [])
        cells = [
            score_cell(
                replace(assigned, extension=extensions.get((user_id or "", assigned.id))),
                [s for s in mine if s.exercise_id == assigned.id],
            )
            for assigned in exercises
        ]
        rows.append(LearnerRow(key, name, email, user_id, cells))
    return rows


@dataclass
class Gradebook:
    """The gradebook as shown: its columns, its rows filtered and sorted, and how."""

    course: Course
    exercises: list[AssignedExercise]
    rows: list[LearnerRow]
    q: str = ""
    only: str = "all"
    exercise: str = ""
    sort: str = "name"
    order: str = "asc"
    learner_count: int = 0
    sort_keys: list[str] = field(default_factory=list)


def _score_key(cell: Cell) -> float:
    return -1.0 if cell.score is None else cell.score


def _matches(row: LearnerRow, q: str, only: str) -> bool:
    if q and q not in row.name.lower() and q not in (row.email or "").lower():
        return False
    if only == "incomplete":
        return any(cell.state != "solved" for cell in row.cells)
    if only == "not-started":
        return all(cell.state == "not-tried" for cell in row.cells)
    if only == "late":
        return any(cell.late_days > 0 and cell.score is not None for cell in row.cells)
    if only == "overridden":
        return any(cell.overridden for cell in row.cells)
    return True


def build_gradebook(
    session: Session,
    course: Course,
    *,
    q: str = "",
    only: str = "all",
    exercise: str = "",
    sort: str = "name",
    order: str = "asc",
) -> Gradebook:
    """The course's gradebook, filtered (`q` in name or email, `only`, one `exercise`) and
    sorted (`name`, `email`, `total` or an exercise id; `asc` or `desc`). Unknown values fall
    back to the defaults rather than fail: they come from links people edit."""
    assigned = assignments_of(session, course.id)
    columns = [a for a in assigned if a.id == exercise] or assigned
    exercise = exercise if len(columns) == 1 and columns[0].id == exercise else ""
    only = only if only in FILTERS else "all"
    order = "desc" if order == "desc" else "asc"
    sort_keys = [*SORTS, *(a.id for a in columns)]
    sort = sort if sort in sort_keys else "name"
    needle = q.strip().lower()

    rows = learner_rows(session, course, columns)
    learner_count = len(rows)
    rows = [row for row in rows if _matches(row, needle, only)]
    rows.sort(key=lambda row: (row.name.lower(), row.email or ""))
    if sort == "email":
        rows.sort(key=lambda row: row.email or "~")
    elif sort == "total":
        rows.sort(key=lambda row: row.total)
    elif sort != "name":
        index = [a.id for a in columns].index(sort)
        rows.sort(key=lambda row: _score_key(row.cells[index]))
    if order == "desc":
        rows.reverse()
    return Gradebook(
        course, columns, rows, q.strip(), only, exercise, sort, order, learner_count, sort_keys
    )


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def csv_text(value: str) -> str:
    """A cell a spreadsheet shows as text, never runs as a formula (CSV injection).

    Spreadsheets read a cell as a formula when it starts with = + - or @, also after leading
    spaces or invisible characters, and in full-width or small forms (U+FF1D, U+FE62): NFKC
    finds those. A leading tab or line break is quoted too. The quote mark makes it text.
    """
    if value[:1] in ("\t", "\r", "\n"):
        return "'" + value
    start = value.lstrip()
    while start and unicodedata.category(start[0]) in ("Cc", "Cf", "Zs"):
        start = start[1:].lstrip()
    if unicodedata.normalize("NFKC", start[:1])[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value


def gradebook_csv(gradebook: Gradebook) -> str:
    """Exactly the rows and columns shown, as CSV (scores as counted).

    The columns keep their order across releases, new ones at the end, so an importer that
    reads by position keeps working: the learner, one score per exercise, the totals (as the
    first releases wrote them), then why each exercise's score counts (docs/api.md)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    titles = [f"{a.exercise.title} ({a.exercise.max_score:g})" for a in gradebook.exercises]
    writer.writerow(
        ["learner", "email", *titles, "total", "max_total", *(f"{t} counted as" for t in titles)]
    )
    for row in gradebook.rows:
        writer.writerow(
            [
                csv_text(row.name),
                csv_text(row.email or ""),
                *(_number(cell.score) for cell in row.cells),
                _number(row.total),
                _number(row.max_total),
                *(cell.counted_as or "" for cell in row.cells),
            ]
        )
    return out.getvalue()


def gradebook_json(gradebook: Gradebook) -> dict[str, Any]:
    """The same as the page and the CSV, with each cell's details."""
    return {
        "course": {"id": gradebook.course.id, "name": gradebook.course.name},
        "filter": {"q": gradebook.q, "only": gradebook.only, "exercise": gradebook.exercise},
        "sort": gradebook.sort,
        "order": gradebook.order,
        "exercises": [
            {
                "id": a.id,
                "title": a.exercise.title,
                "max_score": a.exercise.max_score,
                "due_at": a.assignment.due_at.isoformat() if a.assignment.due_at else None,
                "late_policy": a.assignment.late_policy,
                "late_penalty_percent_per_day": a.assignment.late_penalty_percent_per_day,
                "scoring_policy": a.assignment.scoring_policy,
            }
            for a in gradebook.exercises
        ],
        "rows": [
            {
                "learner": row.name,
                "email": row.email,
                "user_id": row.user_id,
                "total": row.total,
                "max_total": row.max_total,
                "cells": {
                    cell.exercise_id: {
                        "score": cell.score,
                        "max_score": cell.max_score,
                        "state": cell.state,
                        "attempts": cell.attempts,
                        "late_days": cell.late_days,
                        "penalty_percent": cell.penalty_percent,
                        "overridden": cell.overridden,
                        "locked": cell.locked,
                        "counted_as": cell.counted_as,
                        "extended": cell.extension is not None,
                        "submission": cell.counted_submission_id,
                    }
                    for cell in row.cells
                },
            }
            for row in gradebook.rows
        ],
    }


SCORE_BUCKETS = ("0%", "1-25%", "26-50%", "51-75%", "76-99%", "100%")


def score_bucket(score: float, max_score: float) -> int:
    percent = 100 * score / max_score if max_score else 0.0
    if percent <= 0:
        return 0
    if percent >= 100:
        return 5
    return next(i for i, upper in enumerate((25, 50, 75, 100), start=1) if percent <= upper)


@dataclass(frozen=True)
class ExerciseStats:
    """How a class did on one exercise."""

    assigned: AssignedExercise
    submissions: int  # graded
    pending: int
    learners_tried: int  # who started (counted.is_started): the starter alone is no try
    learners_enrolled: int
    learners_solved: int  # of those enrolled
    # per solver: started submissions up to and including the first solve
    attempts_to_solve: list[int]
    score_distribution: list[tuple[str, int]]  # learners' counted scores, in SCORE_BUCKETS
    # (code, submissions, learners), most common first; solves and the starter left out
    diagnoses: list[tuple[str, int, int]]

    @property
    def share_solved(self) -> float | None:
        return self.learners_solved / self.learners_enrolled if self.learners_enrolled else None

    @property
    def median_attempts_to_solve(self) -> float | None:
        return statistics.median(self.attempts_to_solve) if self.attempts_to_solve else None

    @property
    def mean_attempts_to_solve(self) -> float | None:
        return statistics.fmean(self.attempts_to_solve) if self.attempts_to_solve else None


def exercise_stats(session: Session, course: Course, assigned: AssignedExercise) -> ExerciseStats:
    rows = learner_rows(session, course, [assigned])
    submissions = [
        s for s in _course_submissions(session, course.id) if s.exercise_id == assigned.id
    ]
    graded = [s for s in submissions if s.status == SubmissionStatus.GRADED]
    by_learner: dict[str, list[Submission]] = {}
    for submission in submissions:
        if not is_started(submission):
            continue
        key = f"user:{submission.user_id}" if submission.user_id else f"api:{submission.learner}"
        by_learner.setdefault(key, []).append(submission)

    attempts_to_solve = []
    solvers = set()
    for key, mine in by_learner.items():
        for number, submission in enumerate(mine, start=1):
            if is_solved(submission):
                attempts_to_solve.append(number)
                solvers.add(key)
                break
    enrolled = {f"user:{user.id}" for user in members(session, course.id, CourseRole.LEARNER)}

    distribution = [0] * len(SCORE_BUCKETS)
    for row in rows:
        cell = row.cells[0]
        if cell.score is not None:
            distribution[score_bucket(cell.score, cell.max_score)] += 1

    counts: Counter[str] = Counter()
    learners: dict[str, set[str]] = {}
    for submission in graded:
        code = submission.diagnosis or "unknown"
        # A solve is no mistake, nor is the starter code left untouched.
        if code == "correct" or not is_started(submission):
            continue
        counts[code] += 1
        learners.setdefault(code, set()).add(submission.user_id or submission.learner)
    diagnoses = [(code, n, len(learners[code])) for code, n in counts.most_common()]

    return ExerciseStats(
        assigned=assigned,
        submissions=len(graded),
        pending=sum(1 for s in submissions if s.status in ("queued", "running")),
        learners_tried=len(by_learner),
        learners_enrolled=len(enrolled),
        learners_solved=len(solvers & enrolled),
        attempts_to_solve=attempts_to_solve,
        score_distribution=list(zip(SCORE_BUCKETS, distribution, strict=True)),
        diagnoses=diagnoses,
    )


def practice_assignment(exercise: Exercise) -> AssignedExercise:
    """An exercise outside any course: undated, the best submission counts."""
    return AssignedExercise(
        exercise,
        Assignment(
            exercise_id=exercise.id,
            due_at=None,
            late_policy=LatePolicy.PENALTY,
            late_penalty_percent_per_day=0.0,
            scoring_policy=ScoringPolicy.BEST,
        ),
    )


def learner_cells(
    session: Session,
    exercises: list[AssignedExercise],
    *,
    course_id: str | None,
    user_id: str | None,
    anonymous_learner: str | None = None,
) -> list[Cell]:
    """One learner's standing on each exercise: in a course, or in practice (no course).

    In practice a signed-in learner's standing counts their submissions in every course too:
    an exercise solved in a course is solved, and the practice strip says so.
    """
    mine = submissions_of(
        session,
        user_id=user_id,
        anonymous_learner=anonymous_learner,
        course_id=course_id,
        any_course=course_id is None and user_id is not None,
    )
    return [
        score_cell(assigned, [s for s in mine if s.exercise_id == assigned.id])
        for assigned in exercises
    ]


def practice_cells(
    session: Session,
    exercises: list[Exercise],
    *,
    user_id: str | None,
    anonymous_learner: str | None,
) -> list[Cell]:
    return learner_cells(
        session,
        [practice_assignment(exercise) for exercise in exercises],
        course_id=None,
        user_id=user_id,
        anonymous_learner=anonymous_learner,
    )


def assigned_exercise_of(session: Session, submission: Submission) -> AssignedExercise | None:
    """The exercise as the submission's course sets it for its learner (their extension
    too; practice's policy outside a course); None when the exercise is no longer installed."""
    try:
        exercise = get_exercise(submission.exercise_id)
    except UnknownExercise:
        return None
    if submission.course_id is not None:
        try:
            return assignment_of(
                session, submission.course_id, submission.exercise_id, submission.user_id
            )
        except NotFound:
            pass  # taken out of the course: its submissions count as practice would
    return practice_assignment(exercise)


def standings_of(
    session: Session, submissions: list[Submission]
) -> dict[str, tuple[Standing | None, str | None]]:
    """What each submission counts and why, in words for the learner (None: as graded), by
    submission id. Each course's policy is read once."""
    policies: dict[tuple[str | None, str, str | None], AssignedExercise | None] = {}
    out = {}
    for submission in submissions:
        # Per learner too: an extension moves one learner's due date.
        key = (submission.course_id, submission.exercise_id, submission.user_id)
        if key not in policies:
            policies[key] = assigned_exercise_of(session, submission)
        assigned = policies[key]
        standing = submission_standing(assigned, submission) if assigned else None
        out[submission.id] = (standing, standing_words(standing, submission.max_score))
    return out


def standing_of(session: Session, submission: Submission) -> tuple[Standing | None, str | None]:
    return standings_of(session, [submission])[submission.id]


def counted_cell(
    session: Session, submission: Submission, assumed: AssumedOverrides | None = None
) -> Cell | None:
    """The counted score of the learner who made `submission`, for its exercise in its course
    (or practice); with `assumed`, as it would be with those overrides."""
    assigned = assigned_exercise_of(session, submission)
    if assigned is None:
        return None
    query = select(Submission).where(
        Submission.exercise_id == submission.exercise_id,
        Submission.course_id.is_(None)
        if submission.course_id is None
        else Submission.course_id == submission.course_id,
    )
    if submission.user_id is not None:
        query = query.where(Submission.user_id == submission.user_id)
    else:
        query = query.where(Submission.user_id.is_(None), Submission.learner == submission.learner)
    return score_cell(assigned, list(session.scalars(query)), assumed)


def counted_scores_changed(
    session: Session, course: Course, exercise: Exercise, policy: Assignment
) -> int:
    """How many learners' counted scores for `exercise` would change if the course set it with
    `policy` (a due date moved, a penalty or the scoring changed). `policy` is not stored."""
    current = [a for a in assignments_of(session, course.id) if a.id == exercise.id]
    if not current:
        return 0
    before = learner_rows(session, course, current)
    after = learner_rows(session, course, [AssignedExercise(exercise, policy)])
    return sum(
        1
        for old, new in zip(before, after, strict=True)
        if old.cells[0].score != new.cells[0].score
    )
