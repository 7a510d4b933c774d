"""Two accounts of one person merged into the one kept: everything of the duplicate moves to it,
and the duplicate is emptied and disabled (its row stays: the audit log names it). Its
personal tokens move too, so a command-line client or notebook set up with one keeps working,
now acting for the kept account.

Conflicts are resolved and reported: both enrolled in one course keeps one enrolment, with
the higher role; both with a draft of one exercise keeps the newer draft; both having opened
one exercise keeps the earlier open (a timed attempt's clock started then); both given an
extension of one exercise keeps the kept account's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Update, literal_column, select, update
from sqlalchemy.orm import Session

from app.audit import AuditAction, record_event
from app.integrations.models import LtiUser
from app.models import (
    CourseRole,
    DiagnosisReport,
    Draft,
    Enrolment,
    ExerciseOpen,
    Extension,
    HintOpen,
    PersonalToken,
    Submission,
    User,
)
from app.people.accounts import AccountError
from app.people.deletion import empty_account


@dataclass
class MergeReport:
    """What a merge moved, and each conflict it resolved, in words."""

    submissions: int = 0
    overrides: int = 0
    enrolments: int = 0
    drafts: int = 0
    lti_links: int = 0
    tokens: int = 0
    extensions: int = 0
    conflicts: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        moved = (
            f"moves {self.submissions} submissions, {self.enrolments} enrolments, "
            f"{self.drafts} drafts, {self.overrides} overrides given, {self.lti_links} LMS links, "
            f"{self.tokens} personal tokens, {self.extensions} extensions"
        )
        return [moved, *self.conflicts]


def merge_accounts(session: Session, *, keep: User, duplicate: User) -> MergeReport:
    """Move everything of `duplicate` to `keep` (audited); raises AccountError for one account."""
    if keep.id == duplicate.id:
        raise AccountError("the two emails are one account")
    report = MergeReport()
    _merge_enrolments(session, keep, duplicate, report)
    _merge_drafts(session, keep, duplicate, report)
    _merge_opens(session, keep, duplicate, report)
    _merge_extensions(session, keep, duplicate, report)
    # The hints opened and the diagnoses reported are the person's record: they follow it.
    for table in (HintOpen, DiagnosisReport):
        session.execute(update(table).where(table.user_id == duplicate.id).values(user_id=keep.id))
    report.submissions = _moved(
        session,
        update(Submission)
        .where(Submission.user_id == duplicate.id)
        .values(user_id=keep.id, learner=keep.email),
    )
    report.overrides = _moved(
        session,
        update(Submission)
        .where(Submission.override_by_id == duplicate.id)
        .values(override_by_id=keep.id),
    )
    report.lti_links = _moved(
        session,
        update(LtiUser).where(LtiUser.user_id == duplicate.id).values(user_id=keep.id),
    )
    # Before empty_account, which deletes the tokens still on the duplicate.
    report.tokens = _moved(
        session,
        update(PersonalToken).where(PersonalToken.user_id == duplicate.id).values(user_id=keep.id),
    )
    old_email = duplicate.email
    empty_account(
        session,
        duplicate,
        email=f"merged-{duplicate.id}@merged.invalid",
        name=f"Merged into {keep.email}",
    )
    record_event(
        session,
        actor=None,
        action=AuditAction.ACCOUNTS_MERGED,
        email=keep.email,
        duplicate_email=old_email,
        report=report.lines(),
    )
    session.flush()
    return report


def _moved(session: Session, statement: Update) -> int:
    """Run an UPDATE; how many rows it changed."""
    return len(session.execute(statement.returning(literal_column("1"))).all())


def _merge_enrolments(session: Session, keep: User, duplicate: User, report: MergeReport) -> None:
    kept = {
        e.course_id: e
        for e in session.scalars(select(Enrolment).where(Enrolment.user_id == keep.id))
    }
    for enrolment in session.scalars(
        select(Enrolment).where(Enrolment.user_id == duplicate.id)
    ).all():
        ours = kept.get(enrolment.course_id)
        if ours is None:
            enrolment.user_id = keep.id
            report.enrolments += 1
            continue
        if enrolment.role == CourseRole.INSTRUCTOR and ours.role != CourseRole.INSTRUCTOR:
            ours.role = CourseRole.INSTRUCTOR
        report.conflicts.append(
            f"both were enrolled in course {enrolment.course_id}: one enrolment kept, "
            f"as {ours.role}"
        )
        session.delete(enrolment)
    session.flush()


def _merge_drafts(session: Session, keep: User, duplicate: User, report: MergeReport) -> None:
    kept = {
        (d.course_id, d.exercise_id): d
        for d in session.scalars(select(Draft).where(Draft.user_id == keep.id))
    }
    for draft in session.scalars(select(Draft).where(Draft.user_id == duplicate.id)).all():
        ours = kept.get((draft.course_id, draft.exercise_id))
        if ours is None:
            draft.user_id = keep.id
            report.drafts += 1
            continue
        where = f"course {draft.course_id}" if draft.course_id else "practice"
        if draft.updated_at > ours.updated_at:
            ours.code, ours.updated_at = draft.code, draft.updated_at
        report.conflicts.append(
            f"both had a draft of {draft.exercise_id} in {where}: the newer one kept"
        )
        session.delete(draft)
    session.flush()


def _merge_opens(session: Session, keep: User, duplicate: User, report: MergeReport) -> None:
    kept = {
        (o.course_id, o.exercise_id): o
        for o in session.scalars(select(ExerciseOpen).where(ExerciseOpen.user_id == keep.id))
    }
    for opened in session.scalars(
        select(ExerciseOpen).where(ExerciseOpen.user_id == duplicate.id)
    ).all():
        ours = kept.get((opened.course_id, opened.exercise_id))
        if ours is None:
            opened.user_id = keep.id
            continue
        ours.opened_at = min(ours.opened_at, opened.opened_at)
        session.delete(opened)
    session.flush()


def _merge_extensions(session: Session, keep: User, duplicate: User, report: MergeReport) -> None:
    kept = {
        (e.course_id, e.exercise_id)
        for e in session.scalars(select(Extension).where(Extension.user_id == keep.id))
    }
    for extension in session.scalars(
        select(Extension).where(Extension.user_id == duplicate.id)
    ).all():
        if (extension.course_id, extension.exercise_id) not in kept:
            extension.user_id = keep.id
            report.extensions += 1
            continue
        report.conflicts.append(
            f"both had an extension of {extension.exercise_id} in course {extension.course_id}: "
            "the kept account's kept"
        )
        session.delete(extension)
    session.flush()
