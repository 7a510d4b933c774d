"""What a validated launch makes here: the user, the course and its enrolment, the link.

A platform's user is matched by (platform, `sub`) only, never by email: a platform cannot
sign in as a local account by claiming its address. Names and roles follow the latest
launch, as the platform is their source.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.courses.membership import enrolment_of, new_join_code
from app.integrations.launch import AGS_ENDPOINT_CLAIM, NRPS_CLAIM, MessageType, ValidatedLaunch
from app.integrations.models import LtiContext, LtiPlatform, LtiResourceLink, LtiUser
from app.models import Assignment, Course, CourseRole, Enrolment, SiteRole, User
from app.people.accounts import NO_PASSWORD, find_user_by_email
from graders.exercises import UnknownExercise, get_exercise, list_exercises

# The custom parameter naming the exercise a link opens (also what Deep Linking sets).
EXERCISE_PARAMETER = "exercise"
UNNAMED = "LMS user"
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")

LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
# Context roles that teach; a sub-role (".../membership/Instructor#TeachingAssistant") counts
# as its principal role. Everything else (Learner, Mentor, ...) learns.
_TEACHING_ROLES = {"Instructor", "ContentDeveloper", "Administrator"}
_ADMIN_ROLES = {LIS + "institution/person#Administrator", LIS + "system/person#Administrator"}


def course_role_of(roles: list[str]) -> CourseRole:
    """The course role LTI roles map to: instructor for teaching roles, learner otherwise."""
    for role in roles:
        if role in _ADMIN_ROLES or role in _TEACHING_ROLES:
            return CourseRole.INSTRUCTOR
        if role.startswith(LIS + "membership"):
            principal = role.removeprefix(LIS + "membership").lstrip("#/").split("#")[0]
            if principal in _TEACHING_ROLES:
                return CourseRole.INSTRUCTOR
    return CourseRole.LEARNER


def _short(value: Any, limit: int) -> str:
    return " ".join(value.split())[:limit] if isinstance(value, str) else ""


def _display_name(claims: dict[str, Any]) -> str:
    name = _short(claims.get("name"), 200)
    if not name:
        given, family = _short(claims.get("given_name"), 100), _short(claims.get("family_name"), 99)
        name = f"{given} {family}".strip()
    return name or UNNAMED


def _email_for(
    session: Session, platform: LtiPlatform, subject: str, claims: dict[str, Any]
) -> str:
    """The claimed email when no account has it yet; else an address that cannot exist."""
    claimed = _short(claims.get("email"), 255).lower()
    if _EMAIL.fullmatch(claimed) and find_user_by_email(session, claimed) is None:
        return claimed
    digest = hashlib.sha256(f"{platform.id}\0{subject}".encode()).hexdigest()[:24]
    return f"lti-{digest}@lti.invalid"


def lti_account(
    session: Session, platform: LtiPlatform, subject: str, claims: dict[str, Any]
) -> User:
    """The account of the platform's user `subject` (made on first sight); its name follows
    `claims` (an id_token's, or a roster member's)."""
    link = session.scalars(
        select(LtiUser).where(LtiUser.platform_id == platform.id, LtiUser.subject == subject)
    ).one_or_none()
    if link is not None:
        user = session.get(User, link.user_id)
        assert user is not None
        if _display_name(claims) != UNNAMED:
            user.name = _display_name(claims)
        return user
    user = User(
        email=_email_for(session, platform, subject, claims),
        name=_display_name(claims),
        password_hash=NO_PASSWORD,
        site_role=SiteRole.LEARNER,
    )
    session.add(user)
    session.flush()
    session.add(LtiUser(platform_id=platform.id, subject=subject, user_id=user.id))
    session.flush()
    return user


def provision_context(session: Session, launch: ValidatedLaunch) -> tuple[LtiContext, bool]:
    """The launch's context (made if new, then True)."""
    context_claim = launch.claim("context")
    context_claim = context_claim if isinstance(context_claim, dict) else {}
    # A launch outside any course (allowed by the spec) gets one course per deployment.
    context_id = _short(context_claim.get("id"), 255) or f"deployment:{launch.deployment_id}"
    title = (
        _short(context_claim.get("title"), 200)
        or _short(context_claim.get("label"), 200)
        or "LMS course"
    )
    nrps = launch.claims.get(NRPS_CLAIM)
    memberships_url = nrps.get("context_memberships_url") if isinstance(nrps, dict) else None
    context = session.scalars(
        select(LtiContext).where(
            LtiContext.platform_id == launch.platform.id, LtiContext.context_id == context_id
        )
    ).one_or_none()
    new = context is None
    if context is None:
        course = Course(name=title, join_code=new_join_code(), created_by_id=None)
        session.add(course)
        session.flush()
        # The whole unit, undated, as for a course made on the site.
        for exercise in list_exercises():
            session.add(Assignment(course_id=course.id, exercise_id=exercise.id))
        context = LtiContext(
            platform_id=launch.platform.id,
            deployment_id=launch.deployment_id,
            context_id=context_id,
            course_id=course.id,
        )
        session.add(context)
    if isinstance(memberships_url, str) and len(memberships_url) <= 1000:
        context.memberships_url = memberships_url
    session.flush()
    return context, new


def enrol(session: Session, user: User, course_id: str, role: CourseRole) -> None:
    enrolment = enrolment_of(session, user, course_id)
    if enrolment is None:
        session.add(Enrolment(course_id=course_id, user_id=user.id, role=role))
    else:
        enrolment.role = role
    session.flush()


def exercise_named(value: Any) -> str | None:
    """The id of an installed exercise, or None."""
    if not isinstance(value, str):
        return None
    try:
        return get_exercise(value).id
    except UnknownExercise:
        return None


def provision_link(
    session: Session, launch: ValidatedLaunch, context: LtiContext
) -> LtiResourceLink:
    claim = launch.claim("resource_link")
    link_id = _short(claim.get("id"), 255)
    link = session.scalars(
        select(LtiResourceLink).where(
            LtiResourceLink.platform_id == launch.platform.id,
            LtiResourceLink.resource_link_id == link_id,
        )
    ).one_or_none()
    if link is None:
        link = LtiResourceLink(
            platform_id=launch.platform.id, resource_link_id=link_id, lti_context_id=context.id
        )
        session.add(link)
    link.title = _short(claim.get("title"), 255) or link.title
    custom = launch.claim("custom")
    named = exercise_named(custom.get(EXERCISE_PARAMETER)) if isinstance(custom, dict) else None
    if named is not None:
        link.exercise_id = named
    ags = launch.claims.get(AGS_ENDPOINT_CLAIM)
    if isinstance(ags, dict):
        lineitem, scopes = ags.get("lineitem"), ags.get("scope")
        if isinstance(lineitem, str) and len(lineitem) <= 1000:
            link.lineitem_url = lineitem
        lineitems = ags.get("lineitems")
        if isinstance(lineitems, str) and len(lineitems) <= 1000:
            context.lineitems_url = lineitems
        if isinstance(scopes, list) and all(isinstance(s, str) for s in scopes):
            link.ags_scopes = scopes[:10]
    session.flush()
    return link


MAX_FRAME_ORIGINS = 20


def _named_origins(launch: ValidatedLaunch) -> list[str]:
    """The origins a signed launch names for the platform's pages, the page it returns to
    first (Canvas frames from the school's domain, which it names there)."""
    from app.integrations.framing import origin_of

    presentation = launch.claim("launch_presentation")
    tool_platform = launch.claim("tool_platform")
    named = [
        origin_of(presentation.get("return_url")) if isinstance(presentation, dict) else None,
        origin_of(tool_platform.get("url")) if isinstance(tool_platform, dict) else None,
    ]
    return [origin for origin in named if origin is not None]


def lms_page_origin(launch: ValidatedLaunch) -> str:
    """The origin of the LMS page that framed this launch, as well as it is known: the one
    the launch names, else that of the platform's sign-in (its auth URL)."""
    from app.integrations.framing import origin_of

    named = _named_origins(launch)
    return named[0] if named else origin_of(launch.platform.auth_url) or ""


def learn_frame_origins(launch: ValidatedLaunch) -> bool:
    """Keep the origins a signed launch names for the platform's pages; True if any is new."""
    named = set(_named_origins(launch))
    known = list(launch.platform.frame_origins or [])
    new = sorted(o for o in named if o not in known)
    if not new or len(known) >= MAX_FRAME_ORIGINS:
        return False
    launch.platform.frame_origins = (known + new)[:MAX_FRAME_ORIGINS]
    return True


@dataclass(frozen=True)
class Provisioned:
    """Who launched, into which course and with what role; the link for resource links."""

    user: User
    context: LtiContext
    role: CourseRole
    link: LtiResourceLink | None
    new_context: bool
    new_frame_origin: bool
    # Where the LMS page is: the frame's messages to it go there (static/frame-resize.js).
    lms_origin: str


def provision(session: Session, launch: ValidatedLaunch) -> Provisioned:
    """Make or update everything a launch names."""
    user = lti_account(session, launch.platform, launch.claims["sub"], launch.claims)
    context, new_context = provision_context(session, launch)
    role = course_role_of(launch.claim("roles"))
    enrol(session, user, context.course_id, role)
    link = (
        provision_link(session, launch, context)
        if launch.message_type is MessageType.RESOURCE_LINK
        else None
    )
    new_frame_origin = learn_frame_origins(launch)
    session.flush()
    return Provisioned(
        user, context, role, link, new_context, new_frame_origin, lms_page_origin(launch)
    )
