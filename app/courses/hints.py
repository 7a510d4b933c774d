"""Hints on a result: which levels a learner has opened and may open next, the course's rules
for them, every opening recorded, and the counts an instructor sees.

The words are the exercise's (graders/hints.py). Levels open one at a time, per learner,
exercise and diagnosis (a hint opened on one submission stays open on the next with the same
diagnosis). A course may make each next level wait for more attempts with that diagnosis, and
may withhold the last level, the corrected lines. Practice has no course: its rules are the
defaults, unless a course the learner takes sets the exercise: then the strictest of those
courses' rules (`rules_for`), so practice never opens a level the learner's course withholds.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.audit import AuditAction, record_event
from app.errors import AppError
from app.models import (
    Assignment,
    Course,
    CourseRole,
    Enrolment,
    HintOpen,
    Submission,
    SubmissionStatus,
    User,
)
from graders.hints import ANCHOR_PREFIX, LEVELS, hints_for
from graders.report import diagnosis_name

MAX_UNLOCK_ATTEMPTS = 20
MAX_LESSON_URL_CHARS = 2000


class HintRefused(AppError, ValueError):
    """The hint cannot be opened; the message says why."""

    status_code = 422
    title = "Not opened"


class HintSettingsRefused(AppError, ValueError):
    """The course's hint settings as sent cannot be saved; the message says why."""

    status_code = 422
    title = "Not saved"


@dataclass(frozen=True)
class HintRules:
    """A course's hint settings (the defaults for practice)."""

    unlock_attempts: int = 0
    hide_fix: bool = False
    lesson_url: str = ""


def rules_of(course: Course | None) -> HintRules:
    """A course's own settings (the defaults for none): what its settings page shows."""
    if course is None:
        return HintRules()
    return HintRules(course.hint_unlock_attempts, course.hints_hide_fix, course.lesson_url)


def rules_for(session: Session, submission: Submission, course: Course | None) -> HintRules:
    """The rules a submission's hints follow: its course's; for practice, the strictest of the
    courses that set the exercise to its learner (the fix withheld if any withholds it, the
    most attempts between levels, counted in practice). Otherwise the same code submitted as
    practice would open what the learner's course keeps back."""
    if course is not None or submission.user_id is None:
        return rules_of(course)
    courses = session.scalars(
        select(Course)
        .join(Enrolment, Enrolment.course_id == Course.id)
        .join(Assignment, Assignment.course_id == Course.id)
        .where(
            Enrolment.user_id == submission.user_id,
            Enrolment.role == CourseRole.LEARNER,
            Assignment.exercise_id == submission.exercise_id,
            Assignment.removed_at.is_(None),
        )
    ).all()
    return HintRules(
        unlock_attempts=max((c.hint_unlock_attempts for c in courses), default=0),
        hide_fix=any(c.hints_hide_fix for c in courses),
    )


def parse_rules(*, unlock_attempts: str, hide_fix: bool, lesson_url: str) -> HintRules:
    """The settings as sent on the settings page; raises HintSettingsRefused saying why."""
    try:
        attempts = int(unlock_attempts.strip() or "0")
    except ValueError:
        raise HintSettingsRefused(
            f"the attempts before each next hint, {unlock_attempts.strip()!r}, is not a whole "
            "number"
        ) from None
    if not 0 <= attempts <= MAX_UNLOCK_ATTEMPTS:
        raise HintSettingsRefused(
            f"the attempts before each next hint is from 0 to {MAX_UNLOCK_ATTEMPTS}"
        )
    url = lesson_url.strip()
    parts = urlsplit(url)
    if url and (
        parts.scheme not in ("http", "https")
        or not parts.netloc
        or len(url) > MAX_LESSON_URL_CHARS
        or any(c.isspace() for c in url)
    ):
        raise HintSettingsRefused(
            f"the lesson link must be a whole http:// or https:// address of at most "
            f"{MAX_LESSON_URL_CHARS} characters (or empty for the exercise's prompt)"
        )
    return HintRules(attempts, hide_fix, url)


def save_rules(session: Session, course: Course, rules: HintRules, *, by: User) -> bool:
    """Store the course's hint settings and audit them; False when nothing changed."""
    if rules == rules_of(course):
        return False
    course.hint_unlock_attempts = rules.unlock_attempts
    course.hints_hide_fix = rules.hide_fix
    course.lesson_url = rules.lesson_url
    record_event(
        session,
        actor=by,
        action=AuditAction.COURSE_HINTS_SET,
        course_id=course.id,
        hint_unlock_attempts=rules.unlock_attempts,
        hints_hide_fix=rules.hide_fix,
        lesson_url=rules.lesson_url,
    )
    session.flush()
    return True


@dataclass(frozen=True)
class HintView:
    """What a learner's result shows of the hints for its diagnosis."""

    opened: tuple[str, ...]  # the texts of the levels opened, in order
    count: int  # the levels this course ever shows
    next_level: int | None  # the level the button opens, None when all are open
    attempts_needed: int  # more attempts with this diagnosis before the next level opens
    lesson_link: str  # where the lesson explains the diagnosis, "" when nowhere
    fix_withheld: bool = False  # the corrected lines are kept back (by the learner's course)

    @property
    def next_unlocked(self) -> bool:
        return self.next_level is not None and self.attempts_needed == 0


def lesson_link(rules: HintRules, exercise_page: str, lesson_anchor: str, diagnosis: str) -> str:
    """The course's lesson page (with the code as its fragment, when it has none), or the
    section of the exercise's prompt that the hints name, or ""."""
    if rules.lesson_url:
        return rules.lesson_url if "#" in rules.lesson_url else f"{rules.lesson_url}#{diagnosis}"
    return f"{exercise_page}#{ANCHOR_PREFIX}{lesson_anchor}" if lesson_anchor else ""


def hint_count(rules: HintRules, exercise_id: str, diagnosis: str | None) -> int:
    """How many levels a learner with this diagnosis may ever open under these rules."""
    hints = hints_for(exercise_id, diagnosis or "")
    if hints is None:
        return 0
    return len(LEVELS) - 1 if rules.hide_fix else len(LEVELS)


def first_hint(exercise_id: str, diagnosis: str | None) -> str | None:
    hints = hints_for(exercise_id, diagnosis or "")
    return hints.levels[0] if hints else None


def _opened_levels(session: Session, submission: Submission) -> int:
    opened = session.scalar(select(func.max(HintOpen.level)).where(*_same_hints(submission)))
    return opened or 0


def _same_hints(submission: Submission) -> tuple[ColumnElement[bool], ...]:
    course = (
        HintOpen.course_id.is_(None)
        if submission.course_id is None
        else HintOpen.course_id == submission.course_id
    )
    return (
        HintOpen.user_id == submission.user_id,
        course,
        HintOpen.exercise_id == submission.exercise_id,
        HintOpen.diagnosis == submission.diagnosis,
    )


def _attempts_with(session: Session, submission: Submission) -> int:
    """The learner's graded submissions of this exercise, in this course, with this diagnosis."""
    course = (
        Submission.course_id.is_(None)
        if submission.course_id is None
        else Submission.course_id == submission.course_id
    )
    return (
        session.scalar(
            select(func.count()).where(
                Submission.user_id == submission.user_id,
                course,
                Submission.exercise_id == submission.exercise_id,
                Submission.status == SubmissionStatus.GRADED,
                Submission.diagnosis == submission.diagnosis,
            )
        )
        or 0
    )


def hint_view(
    session: Session, submission: Submission, course: Course | None, exercise_page: str
) -> HintView | None:
    """The hints of a graded submission's diagnosis, as its learner sees them; None when it has
    none. Level k opens after 1 + (k - 1) * N attempts with the diagnosis (N the course's
    attempts between levels; 0 means one at a time, at once)."""
    if submission.status != SubmissionStatus.GRADED or submission.user_id is None:
        return None
    hints = hints_for(submission.exercise_id, submission.diagnosis or "")
    if hints is None:
        return None
    rules = rules_for(session, submission, course)
    count = hint_count(rules, submission.exercise_id, submission.diagnosis)
    opened = min(_opened_levels(session, submission), count)
    next_level = opened + 1 if opened < count else None
    needed = 0
    if next_level is not None and rules.unlock_attempts:
        required = 1 + (next_level - 1) * rules.unlock_attempts
        needed = max(0, required - _attempts_with(session, submission))
    return HintView(
        opened=hints.levels[:opened],
        count=count,
        next_level=next_level,
        attempts_needed=needed,
        lesson_link=lesson_link(rules, exercise_page, hints.lesson, submission.diagnosis or ""),
        fix_withheld=rules.hide_fix,
    )


def open_hint(
    session: Session,
    submission: Submission,
    course: Course | None,
    *,
    by: User,
    level: int,
) -> HintOpen | None:
    """Open the next hint level on a submission; None when that level was open already (a
    form sent twice). Raises HintRefused saying why a level cannot be opened."""
    if submission.user_id != by.id:
        raise HintRefused("only the learner who submitted this code can open its hints")
    view = hint_view(session, submission, course, "")
    if view is None:
        raise HintRefused("this result has no hints: they come with a named mistake")
    if level <= len(view.opened):
        return None
    if level == len(LEVELS) and rules_for(session, submission, course).hide_fix:
        raise HintRefused(
            "this course does not show the corrected lines"
            if course is not None
            else "your course does not show the corrected lines for this exercise, so "
            "practice does not either"
        )
    if level != view.next_level:
        raise HintRefused("hints open one at a time, in order: open the one before first")
    if view.attempts_needed:
        raise HintRefused(
            f"the next hint opens after {view.attempts_needed} more attempt"
            f"{'s' if view.attempts_needed != 1 else ''} with this diagnosis"
        )
    opening = HintOpen(
        user_id=by.id,
        course_id=submission.course_id,
        exercise_id=submission.exercise_id,
        submission_id=submission.id,
        diagnosis=submission.diagnosis or "",
        level=level,
    )
    try:
        # Another request opening the same level at the same moment stored it first (the
        # unique indexes of migration 0025): it is open, as asked.
        with session.begin_nested():
            session.add(opening)
    except IntegrityError:
        return None
    return opening


def hint_open_counts(
    session: Session, course_id: str, exercise_id: str
) -> list[tuple[str, list[int]]]:
    """Hints opened per diagnosis and level (learners may open each level once), for one
    exercise of a course: (code, [openings of level 1, 2, 3]) by code."""
    rows = session.execute(
        select(HintOpen.diagnosis, HintOpen.level, func.count())
        .where(HintOpen.course_id == course_id, HintOpen.exercise_id == exercise_id)
        .group_by(HintOpen.diagnosis, HintOpen.level)
    )
    counts: dict[str, list[int]] = {}
    for code, level, count in rows:
        if 1 <= level <= len(LEVELS):
            counts.setdefault(code, [0] * len(LEVELS))[level - 1] = count
    return sorted(counts.items())


def hints_opened_by(session: Session, course_id: str, exercise_id: str) -> dict[str, list[str]]:
    """The hints each learner (by account id) opened for one exercise of a course, in words
    an instructor reads beside their name: "Gradients not cleared before backward: 2 of 3"."""
    rules = rules_of(session.get(Course, course_id))
    rows = session.execute(
        select(HintOpen.user_id, HintOpen.diagnosis, func.max(HintOpen.level))
        .where(HintOpen.course_id == course_id, HintOpen.exercise_id == exercise_id)
        .group_by(HintOpen.user_id, HintOpen.diagnosis)
        .order_by(HintOpen.user_id, HintOpen.diagnosis)
    )
    opened: dict[str, list[str]] = {}
    for user_id, code, level in rows:
        of = hint_count(rules, exercise_id, code)
        opened.setdefault(user_id, []).append(f"{diagnosis_name(code)}: {level} of {of or level}")
    return opened
