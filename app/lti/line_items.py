"""AGS line items: the LMS gradebook columns of a course. The tool makes one for a link that
came without (a link placed by hand, not through Deep Linking), lists them, and reads their
results back so an instructor can see where the LMS and loopgrade disagree.

Per the Assignment and Grade Services spec: the container (`lineitems` in the launch's AGS
claim) is read with `Accept: application/vnd.ims.lis.v2.lineitemcontainer+json` and filtered
by `resource_link_id`, `resource_id`, `tag` and `limit`; a POST to it with
`Content-Type: application/vnd.ims.lis.v2.lineitem+json` makes a line item; `<line item>/results`
is read with `Accept: application/vnd.ims.lis.v2.resultcontainer+json`; both lists come in
pages, the next named by `Link: <...>; rel="next"`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cryptography.fernet import MultiFernet
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.courses.courses import assignment_of
from app.courses.gradebook import learner_cells
from app.lti.ags import (
    AGS_SCOPE,
    LINEITEM_SCOPE,
    AccessTokens,
    PlatformRefused,
    call_platform,
    fetch_all_pages,
    raise_for_reply,
    service_url,
)
from app.lti.models import LtiContext, LtiPlatform, LtiResourceLink, LtiUser
from app.models import User
from graders.exercises import get_exercise

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


def ensure_line_item(
    session: Session, sealing: MultiFernet, tokens: AccessTokens, link: LtiResourceLink
) -> str:
    """The link's line item URL; one is found (made by an earlier try whose answer was lost)
    or made when the link came without, and kept on the link. Flushes."""
    if link.lineitem_url is not None:
        return link.lineitem_url
    context = session.get(LtiContext, link.lti_context_id)
    if context is None or link.exercise_id is None:
        raise PlatformRefused("the link names no exercise, or its LMS course is gone")
    exercise = get_exercise(link.exercise_id)
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
    item = (
        existing[0]
        if existing
        else create_line_item(
            session,
            sealing,
            tokens,
            context,
            label=link.title or exercise.title,
            score_maximum=exercise.max_score,
            resource_id=exercise.id,
            resource_link_id=link.resource_link_id,
        )
    )
    link.lineitem_url = item.url
    session.flush()
    return item.url


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
        assigned = assignment_of(session, course_id, link.exercise_id)
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
