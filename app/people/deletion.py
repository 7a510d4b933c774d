"""An account deleted by its owner.

The user row stays, emptied, because the courses' records point at it: its submissions stay
graded records under "Deleted account", and the audit log keeps who did what. Everything else
that is the person's goes: email, name, password, sessions, drafts, enrolments (so they leave
every gradebook), reset links and LMS links (a new launch makes a new, empty account).
"""

from __future__ import annotations

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app.audit import AuditAction, record_event
from app.courses.membership import CourseError
from app.integrations.models import LtiLaunchTicket, LtiUser
from app.models import (
    Course,
    CourseRole,
    Draft,
    Enrolment,
    PasswordResetRequest,
    PersonalToken,
    Submission,
    User,
    WebSession,
    utc_now,
)
from app.people.accounts import NO_PASSWORD, AccountError, has_password, verify_password

DELETED_NAME = "Deleted account"


def courses_only_taught_by(session: Session, user: User) -> list[Course]:
    """The courses whose only instructor is `user`: they must hand over before deleting."""
    instructors = (
        select(Enrolment.course_id)
        .where(Enrolment.role == CourseRole.INSTRUCTOR)
        .group_by(Enrolment.course_id)
        .having(func.count() == 1)
    )
    return list(
        session.scalars(
            select(Course)
            .join(Enrolment, Enrolment.course_id == Course.id)
            .where(
                Enrolment.user_id == user.id,
                Enrolment.role == CourseRole.INSTRUCTOR,
                Course.id.in_(instructors),
            )
            .order_by(Course.name)
        )
    )


def delete_account(session: Session, user: User, *, password: str) -> None:
    """Empty the account (the module says what stays). Needs the password when it has one;
    refused while it is a course's only instructor."""
    if has_password(user) and not verify_password(user.password_hash, password):
        raise AccountError("the password is not right")
    taught = courses_only_taught_by(session, user)
    if taught:
        names = ", ".join(course.name for course in taught)
        raise CourseError(
            f"you are the only instructor of {names}: add another instructor there first"
        )
    record_event(session, actor=user, action=AuditAction.ACCOUNT_DELETED)
    for table in (Draft, Enrolment, LtiUser):
        session.execute(delete(table).where(table.user_id == user.id))
    empty_account(session, user, email=f"deleted-{user.id}@deleted.invalid", name=DELETED_NAME)
    # A page's submission names its learner by email too.
    session.execute(
        update(Submission).where(Submission.user_id == user.id).values(learner=user.email)
    )
    session.flush()


def empty_account(session: Session, user: User, *, email: str, name: str) -> None:
    """What deleting and merging away do alike: the row keeps only the given email and name,
    signs in nowhere, and its sessions and links go."""
    for table in (WebSession, PasswordResetRequest, LtiLaunchTicket, PersonalToken):
        session.execute(delete(table).where(table.user_id == user.id))
    user.email = email
    user.name = name[:200]
    user.password_hash = NO_PASSWORD
    user.disabled_at = utc_now()
    session.flush()
