"""Grade passback (LTI Assignment and Grade Services) and roster sync (NRPS).

A graded submission in a course reached through LTI writes one outbox message: the learner's
counted score under the course's policy, with the time it was decided. The outbox delivers
it with `deliver_score`: an access token from the platform (client credentials with a signed
client assertion, cached until shortly before it expires), then the score POSTed to the line
item. The timestamp is the original one on every retry: Moodle answers 409 to a timestamp
not newer than the score it holds, which after a lost answer means "already applied".
"""

from __future__ import annotations

import enum
import logging
from datetime import datetime
from typing import Any, NamedTuple

from cryptography.fernet import MultiFernet
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.courses.gradebook import learner_cells
from app.courses.membership import assignment_of
from app.db import SessionFactory
from app.integrations.ags_client import (
    LINEITEM_SCOPE,
    MEMBERSHIP_MEDIA_TYPE,
    NRPS_SCOPE,
    SCORE_MEDIA_TYPE,
    SCORE_SCOPE,
    AccessTokens,
    LineItemBeingMade,
    call_platform,
    fetch_all_pages,
    raise_for_reply,
    service_url,
)
from app.integrations.delivery_errors import PlatformRefused
from app.integrations.keys import key_sealing
from app.integrations.line_items import ensure_line_item
from app.integrations.models import LtiContext, LtiPlatform, LtiResourceLink, LtiUser
from app.models import Enrolment, Submission, utc_now
from app.outbox import DeliveryDeferred, PermanentFailure, add_to_outbox
from app.settings import Settings

log = logging.getLogger(__name__)

LTI_SCORE_KIND = "lti-score"
LTI_ROSTER_KIND = "lti-roster"


class DeliveryOutcome(enum.StrEnum):
    DELIVERED = "delivered"
    # Moodle's 409: the platform holds a score at least as new: this one was applied before.
    ALREADY_APPLIED = "already-applied"


def score_message(session: Session, submission: Submission) -> dict[str, Any] | None:
    """The outbox payload for a graded submission's counted score, or None when the learner
    and exercise are not reached through an LTI link with a line item, or one the tool may
    make (the course's line items service and the lineitem scope)."""
    if submission.course_id is None or submission.user_id is None:
        return None
    row = session.execute(
        select(LtiResourceLink, LtiUser)
        .join(LtiContext, LtiContext.id == LtiResourceLink.lti_context_id)
        .join(LtiUser, LtiUser.platform_id == LtiResourceLink.platform_id)
        .where(
            LtiContext.course_id == submission.course_id,
            LtiResourceLink.exercise_id == submission.exercise_id,
            or_(LtiResourceLink.lineitem_url.is_not(None), LtiContext.lineitems_url.is_not(None)),
            LtiUser.user_id == submission.user_id,
        )
        .order_by(LtiResourceLink.lineitem_url.is_(None), LtiResourceLink.created_at)
    ).first()
    if row is None:
        return None
    link, lti_user = row
    if link.ags_scopes is not None and SCORE_SCOPE not in link.ags_scopes:
        return None
    if link.lineitem_url is None and LINEITEM_SCOPE not in (link.ags_scopes or []):
        return None
    assigned = assignment_of(
        session, submission.course_id, submission.exercise_id, submission.user_id
    )
    (cell,) = learner_cells(
        session, [assigned], course_id=submission.course_id, user_id=submission.user_id
    )
    if cell.score is None:
        return None
    return {
        "platform_id": link.platform_id,
        # None: made by the first delivery (ensure_line_item).
        "lineitem_url": link.lineitem_url,
        "resource_link": link.id,
        "user_sub": lti_user.subject,
        "score_given": cell.score,
        "score_maximum": cell.max_score,
        # Decided now; kept through every retry (Moodle orders scores by it).
        "timestamp": utc_now().isoformat(),
        "submission_id": submission.id,
        "course_id": submission.course_id,
        "exercise_id": submission.exercise_id,
    }


def deliver_score(
    session: Session, sealing: MultiFernet, tokens: AccessTokens, payload: dict[str, Any]
) -> DeliveryOutcome:
    """POST one score. Raises PlatformUnavailable (retry), PlatformRefused (give up) or
    LineItemBeingMade (wait: another delivery is making the link's line item). Writes only in
    transactions of its own (a line item it makes is kept on the link at once), so the
    caller's session may be one that only reads."""
    platform = session.get(LtiPlatform, payload["platform_id"])
    if platform is None:
        raise PlatformRefused("the platform is no longer registered")
    # The timestamp must parse, with its zone: a payload is checked before it is sent.
    datetime.fromisoformat(payload["timestamp"])
    body = {
        "userId": payload["user_sub"],
        "scoreGiven": payload["score_given"],
        "scoreMaximum": payload["score_maximum"],
        "timestamp": payload["timestamp"],
        "activityProgress": "Completed",
        # Canvas and Moodle record a score only when it is FullyGraded.
        "gradingProgress": "FullyGraded",
    }
    lineitem_url = payload["lineitem_url"]
    if lineitem_url is None:
        # A link that came without a line item: one is made (or found) for it, once.
        link = session.get(LtiResourceLink, payload["resource_link"])
        if link is None:
            raise PlatformRefused("the LMS link is no longer known here")
        lineitem_url = ensure_line_item(session, sealing, tokens, link)
    url = service_url(lineitem_url, "scores")
    reply = call_platform(
        session, sealing, tokens, platform, "POST", url,
        scope=SCORE_SCOPE, headers={"Content-Type": SCORE_MEDIA_TYPE}, json_body=body,
    )  # fmt: skip
    if reply.status_code == 409:
        return DeliveryOutcome.ALREADY_APPLIED
    raise_for_reply(reply, f"POST {url}")
    return DeliveryOutcome.DELIVERED


class RosterSync(NamedTuple):
    added: int
    updated: int


def sync_roster(
    session: Session, sealing: MultiFernet, tokens: AccessTokens, context: LtiContext
) -> RosterSync:
    """Enrol every member the platform lists (NRPS), with their role; follows rel="next"."""
    from app.integrations.provisioning import course_role_of, enrol, lti_account

    if context.memberships_url is None:
        raise PlatformRefused("the platform offers no roster (Names and Role service) here")
    platform = session.get(LtiPlatform, context.platform_id)
    assert platform is not None
    added = updated = 0
    members = fetch_all_pages(
        session,
        sealing,
        tokens,
        platform,
        context.memberships_url,
        scope=NRPS_SCOPE,
        accept=MEMBERSHIP_MEDIA_TYPE,
        # The membership container is an object whose members are the entries.
        entries_of=lambda page: page["members"],
    )
    for member in members:
        if not isinstance(member, dict) or not isinstance(member.get("user_id"), str):
            continue
        if member.get("status", "Active") != "Active":
            continue
        roles = member.get("roles")
        role = course_role_of(
            [r for r in roles if isinstance(r, str)] if isinstance(roles, list) else []
        )
        user = lti_account(session, platform, member["user_id"][:255], member)
        already = session.scalars(
            select(Enrolment.id).where(
                Enrolment.course_id == context.course_id, Enrolment.user_id == user.id
            )
        ).first()
        enrol(session, user, context.course_id, role)
        if already is None:
            added += 1
        else:
            updated += 1
    context.roster_synced_at = utc_now()
    session.flush()
    return RosterSync(added, updated)


# The access tokens of this process's deliveries (a cache: each process asks for its own).
ACCESS_TOKENS = AccessTokens()


def deliver_lti_score(
    sessions: SessionFactory, settings: Settings, payload: dict[str, Any]
) -> None:
    """The outbox's delivery of a score: a refusal for good is recorded, not retried."""
    with sessions() as session:
        # Reads only, each committed at once (DBAPI autocommit): no transaction, let alone a
        # write lock, stays open while the platform answers. What it writes (the link's claim
        # and line item) goes in transactions of its own.
        session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        try:
            outcome = deliver_score(session, key_sealing(settings), ACCESS_TOKENS, payload)
        except PlatformRefused as exc:
            raise PermanentFailure(str(exc)) from None
        except LineItemBeingMade as exc:
            # Look again soon, and at the latest when the claim lapses (its holder died).
            lapses_in_seconds = (exc.claimed_until - utc_now()).total_seconds()
            raise DeliveryDeferred(
                str(exc),
                retry_after_seconds=max(
                    0.0, min(lapses_in_seconds, settings.outbox_retry_base_seconds)
                ),
            ) from None
    log.info(
        "submission %s: score %s/%s for the LMS: %s",
        payload.get("submission_id"),
        payload.get("score_given"),
        payload.get("score_maximum"),
        outcome,
    )


def send_score_to_lms(session: Session, submission: Submission) -> None:
    """A graded submission reached through LTI: its counted score goes to the LMS."""
    message = score_message(session, submission)
    if message is not None:
        add_to_outbox(session, LTI_SCORE_KIND, message)


def deliver_roster_sync(
    sessions: SessionFactory, settings: Settings, payload: dict[str, Any]
) -> None:
    """Enrol a context's roster (asked for on its first launch, or by an instructor)."""
    with sessions.begin() as session:
        context = session.get(LtiContext, payload["lti_context_id"])
        if context is None:
            raise PermanentFailure("the LMS course is no longer known here")
        try:
            synced = sync_roster(session, key_sealing(settings), ACCESS_TOKENS, context)
        except PlatformRefused as exc:
            raise PermanentFailure(str(exc)) from None
    log.info("roster of LMS course %s: %d added, %d updated", context.context_id, *synced)


def request_roster_sync(session: Session, context: LtiContext) -> None:
    add_to_outbox(
        session,
        LTI_ROSTER_KIND,
        {"lti_context_id": context.id, "course_id": context.course_id},
    )
