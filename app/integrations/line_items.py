"""AGS line items: the LMS gradebook columns of a course. The tool makes one for a link that
came without (a link placed by hand, not through Deep Linking), lists them, and reads their
results back so an instructor can see where the LMS and loopgrade disagree.

One idea over 400 lines: the line items of a course's AGS container, from listing them to
reading their results back.

Per the Assignment and Grade Services spec: the container (`lineitems` in the launch's AGS
claim) is read with `Accept: application/vnd.ims.lis.v2.lineitemcontainer+json` and filtered
by `resource_link_id`, `resource_id`, `tag` and `limit`; a POST to it with
`Content-Type: application/vnd.ims.lis.v2.lineitem+json` makes a line item; `<line item>/results`
is read with `Accept: application/vnd.ims.lis.v2.resultcontainer+json`; both lists come in
pages, the next named by `Link: <...>; rel="next"`.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cryptography.fernet import MultiFernet
from sqlalchemy import Connection, Engine, or_, select, update
from sqlalchemy.orm import Session

from app.courses.gradebook import learner_cells
from app.courses.membership import assignment_of
from app.integrations.ags_client import (
    AGS_SCOPE,
    HTTP_TIMEOUT_SECONDS,
    LINEITEM_SCOPE,
    AccessTokens,
    LineItemBeingMade,
    call_platform,
    fetch_all_pages,
    raise_for_reply,
    service_url,
)
from app.integrations.delivery_errors import PlatformRefused, PlatformUnavailable
from app.integrations.models import LtiContext, LtiPlatform, LtiResourceLink, LtiUser
from app.models import User, utc_now
from graders.exercises import get_exercise

log = logging.getLogger(__name__)

RESULT_READ_SCOPE = AGS_SCOPE + "result.readonly"
LINEITEM_MEDIA_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEM_CONTAINER_MEDIA_TYPE = "application/vnd.ims.lis.v2.lineitemcontainer+json"
RESULT_CONTAINER_MEDIA_TYPE = "application/vnd.ims.lis.v2.resultcontainer+json"
# Marks the line items this tool made, among the course's others.
LINE_ITEM_TAG = "loopgrade"


@dataclass(frozen=True)
class LineItem:
    url: str  # its `id`: the line item's own URL
    label: str
    score_maximum: float | None
    resource_id: str | None
    resource_link_id: str | None
    tag: str | None


@dataclass(frozen=True)
class PlatformResult:
    user_id: str
    result_score: float | None
    result_maximum: float | None


def _text(value: Any) -> str | None:
    return value[:1000] if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _line_item(found: Any, where: str) -> LineItem:
    if not isinstance(found, dict) or not isinstance(found.get("id"), str):
        raise PlatformRefused(f"{where} answered a line item without an id")
    return LineItem(
        url=found["id"][:1000],
        label=_text(found.get("label")) or "",
        score_maximum=_number(found.get("scoreMaximum")),
        resource_id=_text(found.get("resourceId")),
        resource_link_id=_text(found.get("resourceLinkId")),
        tag=_text(found.get("tag")),
    )


def _container(session: Session, context: LtiContext) -> tuple[LtiPlatform, str]:
    """The course's platform and line items container URL."""
    platform = session.get(LtiPlatform, context.platform_id)
    if platform is None or context.lineitems_url is None:
        raise PlatformRefused("the LMS offers no line items service (AGS) for this course")
    return platform, context.lineitems_url


def list_line_items(
    session: Session,
    sealing: MultiFernet,
    tokens: AccessTokens,
    context: LtiContext,
    *,
    resource_link_id: str | None = None,
    resource_id: str | None = None,
    tag: str | None = None,
    limit: int | None = None,
) -> list[LineItem]:
    """The LMS course's line items (all pages), filtered as the platform allows."""
    platform, url = _container(session, context)
    filters = {"resource_link_id": resource_link_id, "resource_id": resource_id, "tag": tag}
    params = {name: value for name, value in filters.items() if value is not None}
    if limit is not None:
        params["limit"] = str(limit)
    found = fetch_all_pages(
        session,
        sealing,
        tokens,
        platform,
        url,
        # Not lineitem.readonly: the tool's configuration asks for lineitem, which reads too,
        # and Canvas grants only the scopes its developer key lists.
        scope=LINEITEM_SCOPE,
        accept=LINEITEM_CONTAINER_MEDIA_TYPE,
        params=params,
    )
    return [_line_item(item, url) for item in found]


def create_line_item(
    session: Session,
    sealing: MultiFernet,
    tokens: AccessTokens,
    context: LtiContext,
    *,
    label: str,
    score_maximum: float,
    resource_id: str,
    resource_link_id: str | None,
) -> LineItem:
    """POST a new line item to the course's container; the platform answers it with its id."""
    platform, url = _container(session, context)
    body: dict[str, Any] = {
        "scoreMaximum": score_maximum,
        "label": label,
        "resourceId": resource_id,
        "tag": LINE_ITEM_TAG,
    }
    if resource_link_id is not None:
        body["resourceLinkId"] = resource_link_id
    reply = call_platform(
        session, sealing, tokens, platform, "POST", url, scope=LINEITEM_SCOPE,
        headers={"Content-Type": LINEITEM_MEDIA_TYPE, "Accept": LINEITEM_MEDIA_TYPE},
        json_body=body,
    )  # fmt: skip
    what = f"line item POST to {url}"
    raise_for_reply(reply, what)
    try:
        created = reply.json()
    except ValueError:
        raise PlatformRefused(f"{what} answered no JSON") from None
    return _line_item(created, what)


def delete_line_item(
    session: Session,
    sealing: MultiFernet,
    tokens: AccessTokens,
    platform: LtiPlatform,
    lineitem_url: str,
) -> None:
    """DELETE a line item (the spec's line item service); one already gone is fine."""
    reply = call_platform(
        session, sealing, tokens, platform, "DELETE", lineitem_url, scope=LINEITEM_SCOPE,
        headers={"Accept": LINEITEM_MEDIA_TYPE},
    )  # fmt: skip
    if reply.status_code != 404:
        raise_for_reply(reply, f"DELETE {lineitem_url}")


# How long a delivery may take to find or make a link's line item before its claim lapses and
# it is presumed dead: a token request, a few pages of the list and the POST, each given
# HTTP_TIMEOUT_SECONDS.
LINE_ITEM_CLAIM_SECONDS = 4 * HTTP_TIMEOUT_SECONDS


def _claim_link(bind: Engine | Connection, link_id: str) -> tuple[str | None, str | None]:
    """Claim the making of a link's line item, in a committed transaction of its own:
    (the claim's token, None), or (None, its URL) when the link has its line item by now.
    Raises LineItemBeingMade while another delivery holds the claim.

    One UPDATE whose WHERE is the test: it is the transaction's first statement, so on SQLite it
    waits for the write lock (busy timeout) instead of failing on a stale read, and on
    PostgreSQL a second claimer waits on the first's row lock and then sees its claim."""
    token = secrets.token_hex(16)
    with Session(bind) as own, own.begin():
        now = utc_now()
        claimed = own.execute(
            update(LtiResourceLink)
            .where(
                LtiResourceLink.id == link_id,
                LtiResourceLink.lineitem_url.is_(None),
                or_(
                    LtiResourceLink.lineitem_claimed_until.is_(None),
                    LtiResourceLink.lineitem_claimed_until <= now,
                ),
            )
            .values(
                lineitem_claim=token,
                lineitem_claimed_until=now + timedelta(seconds=LINE_ITEM_CLAIM_SECONDS),
            )
            .returning(LtiResourceLink.id)
            .execution_options(synchronize_session=False)
        ).first()
        if claimed is not None:
            return token, None
        row = own.execute(
            select(LtiResourceLink.lineitem_url, LtiResourceLink.lineitem_claimed_until).where(
                LtiResourceLink.id == link_id
            )
        ).one_or_none()
    if row is None:
        raise PlatformRefused("the LMS link is no longer known here")
    if row.lineitem_url is not None:
        return None, row.lineitem_url
    assert row.lineitem_claimed_until is not None  # else the UPDATE would have claimed it
    raise LineItemBeingMade(row.lineitem_claimed_until)


def _keep_line_item(bind: Engine | Connection, link_id: str, lineitem_url: str) -> str | None:
    """Keep `lineitem_url` on the link unless one is kept already (the first kept wins, even
    over a claim taken after this delivery's lapsed); the link's line item URL after it."""
    with Session(bind) as own, own.begin():
        own.execute(
            update(LtiResourceLink)
            .where(LtiResourceLink.id == link_id, LtiResourceLink.lineitem_url.is_(None))
            .values(lineitem_url=lineitem_url, lineitem_claim=None, lineitem_claimed_until=None)
            .execution_options(synchronize_session=False)
        )
        return own.scalars(
            select(LtiResourceLink.lineitem_url).where(LtiResourceLink.id == link_id)
        ).one_or_none()


def _release_claim(bind: Engine | Connection, link_id: str, token: str) -> None:
    """Give the claim back after a failed try, so the next delivery need not wait for it to
    lapse; a claim taken since by another is not touched."""
    with Session(bind) as own, own.begin():
        own.execute(
            update(LtiResourceLink)
            .where(LtiResourceLink.id == link_id, LtiResourceLink.lineitem_claim == token)
            .values(lineitem_claim=None, lineitem_claimed_until=None)
            .execution_options(synchronize_session=False)
        )


def ensure_line_item(
    session: Session, sealing: MultiFernet, tokens: AccessTokens, link: LtiResourceLink
) -> str:
    """The link's line item URL; when the link came without one, it is found (made by an
    earlier try whose answer was lost) or made, and kept on the link, by one delivery at a
    time: the one holding the link's claim. Raises LineItemBeingMade while another holds it.

    `session` only reads, across the platform's answers; the claim and the URL are written
    in short transactions of their own, committed at once, so other hosts see them."""
    if link.lineitem_url is not None:
        return link.lineitem_url
    context = session.get(LtiContext, link.lti_context_id)
    if context is None or link.exercise_id is None:
        raise PlatformRefused("the link names no exercise, or its LMS course is gone")
    platform, _ = _container(session, context)
    exercise = get_exercise(link.exercise_id)
    bind = session.get_bind()
    claim, kept_meanwhile = _claim_link(bind, link.id)
    if claim is None:
        assert kept_meanwhile is not None
        session.refresh(link)
        return kept_meanwhile
    try:
        # Deliveries are at least once: look for the one a lost answer made before making one.
        existing = [
            item
            for item in list_line_items(
                session,
                sealing,
                tokens,
                context,
                resource_link_id=link.resource_link_id,
                resource_id=exercise.id,
            )
            # A platform may ignore the filters.
            if item.resource_link_id == link.resource_link_id and item.resource_id == exercise.id
        ]
        made = None
        if not existing:
            made = create_line_item(
                session,
                sealing,
                tokens,
                context,
                label=link.title or exercise.title,
                score_maximum=exercise.max_score,
                resource_id=exercise.id,
                resource_link_id=link.resource_link_id,
            )
        url = existing[0].url if made is None else made.url
        kept = _keep_line_item(bind, link.id, url)
    except BaseException:
        _release_claim(bind, link.id, claim)
        raise
    if kept is None:
        raise PlatformRefused("the LMS link is no longer known here")
    if made is not None and kept != made.url:
        # This delivery's claim lapsed while its POST was on the way, and another made and
        # kept the column meanwhile: the one made here has no score (no delivery knew its
        # URL), so it is removed, and the score goes to the kept one.
        log.warning(
            "link %s: claim lapsed while making a line item; removing %s, keeping %s",
            link.resource_link_id,
            made.url,
            kept,
        )
        try:
            delete_line_item(session, sealing, tokens, platform, made.url)
        except (PlatformRefused, PlatformUnavailable) as exc:
            log.warning(
                "link %s: the extra LMS column %s stays: %s", link.resource_link_id, made.url, exc
            )
    session.refresh(link)
    return kept


def read_results(
    session: Session,
    sealing: MultiFernet,
    tokens: AccessTokens,
    platform: LtiPlatform,
    lineitem_url: str,
    *,
    user_id: str | None = None,
    limit: int | None = None,
) -> list[PlatformResult]:
    """What the LMS gradebook holds for a line item (all pages): `GET <line item>/results`."""
    params = {"user_id": user_id} if user_id is not None else {}
    if limit is not None:
        params["limit"] = str(limit)
    found = fetch_all_pages(
        session,
        sealing,
        tokens,
        platform,
        service_url(lineitem_url, "results"),
        scope=RESULT_READ_SCOPE,
        accept=RESULT_CONTAINER_MEDIA_TYPE,
        params=params,
    )
    return [
        PlatformResult(
            user_id=result["userId"][:255],
            result_score=_number(result.get("resultScore")),
            result_maximum=_number(result.get("resultMaximum")),
        )
        for result in found
        if isinstance(result, dict) and isinstance(result.get("userId"), str)
    ]


@dataclass(frozen=True)
class Reconciled:
    """One learner on one LMS column: what the LMS holds and what loopgrade counts."""

    exercise_id: str
    lineitem_url: str
    learner: str  # the account's name, or the platform's user id
    lms_score: float | None
    lms_maximum: float | None
    counted_score: float | None
    max_score: float

    @property
    def agrees(self) -> bool:
        if self.counted_score is None or self.lms_score is None:
            return self.counted_score is None and self.lms_score is None
        # The LMS may scale to its own maximum.
        lms_maximum = self.lms_maximum or self.max_score
        return abs(self.lms_score / lms_maximum - self.counted_score / self.max_score) < 1e-6


def reconcile_course(
    session: Session, sealing: MultiFernet, tokens: AccessTokens, course_id: str
) -> list[Reconciled]:
    """Each learner the LMS knows, on each of the course's links with a line item."""
    rows: list[Reconciled] = []
    links = session.execute(
        select(LtiResourceLink, LtiContext)
        .join(LtiContext, LtiContext.id == LtiResourceLink.lti_context_id)
        .where(
            LtiContext.course_id == course_id,
            LtiResourceLink.lineitem_url.is_not(None),
            LtiResourceLink.exercise_id.is_not(None),
        )
        .order_by(LtiResourceLink.created_at)
    ).all()
    for link, context in links:
        assert link.lineitem_url is not None and link.exercise_id is not None
        platform = session.get(LtiPlatform, context.platform_id)
        assert platform is not None
        results = {
            r.user_id: r
            for r in read_results(session, sealing, tokens, platform, link.lineitem_url)
        }
        learners = session.execute(
            select(LtiUser.subject, User)
            .join(User, User.id == LtiUser.user_id)
            .where(LtiUser.platform_id == platform.id)
        ).all()
        for subject, user in learners:
            # As set for this learner: an extension moves their due date.
            assigned = assignment_of(session, course_id, link.exercise_id, user.id)
            (cell,) = learner_cells(session, [assigned], course_id=course_id, user_id=user.id)
            result = results.pop(subject, None)
            if result is None and cell.score is None:
                continue
            rows.append(
                Reconciled(
                    exercise_id=link.exercise_id,
                    lineitem_url=link.lineitem_url,
                    learner=user.name or subject,
                    lms_score=result.result_score if result else None,
                    lms_maximum=result.result_maximum if result else None,
                    counted_score=cell.score,
                    max_score=cell.max_score,
                )
            )
        for subject, result in results.items():  # LMS users who never came here
            rows.append(
                Reconciled(
                    exercise_id=link.exercise_id,
                    lineitem_url=link.lineitem_url,
                    learner=subject,
                    lms_score=result.result_score,
                    lms_maximum=result.result_maximum,
                    counted_score=None,
                    max_score=assigned.exercise.max_score,
                )
            )
    return rows
