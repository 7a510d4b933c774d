"""A course's integrations page, for its instructors: REST API keys, webhooks (with a test
event and the delivery log), the LMS links and the grade passback that failed (to retry)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.access import CsrfViewerDep, Viewer, ViewerDep
from app.api_keys import create_api_key, keys_of_course, revoke_api_key
from app.db import SessionDep
from app.integrations.ags import LTI_ROSTER_KIND, LTI_SCORE_KIND, request_roster_sync
from app.integrations.models import LtiContext, LtiResourceLink, Webhook
from app.integrations.webhooks import (
    WEBHOOK_KIND,
    WebhookError,
    create_webhook,
    revoke_webhook,
    sample_event_message,
    webhooks_of,
)
from app.models import ApiKey, Course, OutboxMessage, OutboxStatus
from app.outbox import add_to_outbox, retry_outbox_message
from app.permissions import InstructorCourseDep, InstructorCourseFormDep
from app.rendering import PageError, render
from app.settings import SettingsDep

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

DONE_MESSAGES = {
    "key-revoked": "API key revoked: it is refused from now on.",
    "webhook-removed": "Webhook removed: nothing more is sent to it.",
    "webhook-added": "Webhook added. Its signing secret is shown below.",
    "test-sent": "Test event queued: it appears in the delivery log once sent.",
    "retried": "Queued again: it is sent within a few seconds.",
    "roster": "Roster sync queued: the LMS course's members are enrolled within a minute.",
}


MAX_DELIVERIES_SHOWN = 50
KIND_LABELS = {
    LTI_SCORE_KIND: "LMS score",
    LTI_ROSTER_KIND: "LMS roster",
    WEBHOOK_KIND: "webhook",
}


@dataclass(frozen=True)
class Delivery:
    id: int
    kind_label: str
    target: str
    status: str
    attempts: int
    created_at: datetime
    last_error: str | None


def deliveries_of(session: Session, course: Course) -> list[Delivery]:
    """The course's outbox messages (scores, rosters, webhook events), newest first."""
    rows = session.scalars(
        select(OutboxMessage)
        .where(
            OutboxMessage.kind.in_(list(KIND_LABELS)),
            OutboxMessage.payload["course_id"].as_string() == course.id,
        )
        .order_by(OutboxMessage.id.desc())
        .limit(MAX_DELIVERIES_SHOWN)
    )
    webhook_urls = {w.id: w.url for w in session.scalars(select(Webhook))}
    deliveries = []
    for row in rows:
        payload = row.payload
        if row.kind == WEBHOOK_KIND:
            target = f"{payload['event']['type']} to {webhook_urls.get(payload['webhook_id'], '?')}"
        elif row.kind == LTI_SCORE_KIND:
            target = (
                f"{payload['exercise_id']}: {payload['score_given']:g} for {payload['user_sub']}"
            )
        else:
            target = "the LMS course's members"
        deliveries.append(
            Delivery(
                row.id,
                KIND_LABELS[row.kind],
                target,
                row.status,
                row.attempts,
                row.created_at,
                row.last_error,
            )
        )
    return deliveries


def integrations_context(session: Session, course: Course) -> dict[str, Any]:
    links = session.scalars(
        select(LtiResourceLink)
        .join(LtiContext, LtiContext.id == LtiResourceLink.lti_context_id)
        .where(LtiContext.course_id == course.id)
        .order_by(LtiResourceLink.created_at)
    ).all()
    return {
        "course": course,
        "is_instructor": True,
        "api_keys": keys_of_course(session, course.id),
        "webhooks": webhooks_of(session, course.id),
        "lti_links": links,
        "lti_contexts": session.scalars(
            select(LtiContext).where(LtiContext.course_id == course.id)
        ).all(),
        "deliveries": deliveries_of(session, course),
    }


def _page(
    request: Request,
    session: Session,
    viewer: Viewer,
    course: Course,
    *,
    status_code: int = 200,
    **extra: Any,
) -> HTMLResponse:
    context = {**integrations_context(session, course), **extra}
    return render(request, viewer, "integrations.html", context, status_code=status_code)


def _done(course_id: str, done: str) -> Response:
    return RedirectResponse(f"/courses/{course_id}/integrations?done={done}", status_code=303)


@router.get("/courses/{course_id}/integrations")
def integrations_page(
    request: Request,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
    done: str = "",
) -> HTMLResponse:
    return _page(request, session, viewer, course, notice=DONE_MESSAGES.get(done))


@router.post("/courses/{course_id}/integrations/keys")
def add_api_key(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    course: InstructorCourseFormDep,
    name: Annotated[str, Form()] = "",
) -> Response:
    name = " ".join(name.split())[:200]
    if not name:
        return _page(
            request, session, viewer, course, status_code=422, error="Name the key (who uses it)."
        )
    api_key, secret = create_api_key(session, name=name, course_id=course.id)
    # Shown once, in this answer only; only its hash is kept.
    return _page(request, session, viewer, course, new_key=(api_key, secret))


@router.post("/courses/{course_id}/integrations/keys/{key_id}/revoke")
def revoke_key(key_id: str, session: SessionDep, course: InstructorCourseFormDep) -> Response:
    api_key = session.get(ApiKey, key_id)
    if api_key is None or api_key.course_id != course.id:
        raise PageError(404, "Not found", "This course has no such API key.")
    revoke_api_key(session, api_key)
    return _done(course.id, "key-revoked")


@router.post("/courses/{course_id}/integrations/webhooks")
def add_webhook(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    course: InstructorCourseFormDep,
    url: Annotated[str, Form()] = "",
) -> Response:
    try:
        webhook = create_webhook(
            session,
            course_id=course.id,
            url=url,
            allow_private_addresses=settings.webhook_allow_private_addresses,
        )
    except WebhookError as exc:
        return _page(request, session, viewer, course, status_code=422, error=str(exc))
    return _page(request, session, viewer, course, new_webhook=webhook)


def course_webhook(session: Session, course: Course, webhook_id: str) -> Webhook:
    webhook = session.get(Webhook, webhook_id)
    if webhook is None or webhook.course_id != course.id or webhook.revoked_at is not None:
        raise PageError(404, "Not found", "This course has no such webhook.")
    return webhook


@router.post("/courses/{course_id}/integrations/webhooks/{webhook_id}/remove")
def remove_webhook(
    webhook_id: str, session: SessionDep, course: InstructorCourseFormDep
) -> Response:
    revoke_webhook(session, course_webhook(session, course, webhook_id))
    return _done(course.id, "webhook-removed")


@router.post("/courses/{course_id}/integrations/webhooks/{webhook_id}/test")
def send_test_event(
    webhook_id: str, session: SessionDep, course: InstructorCourseFormDep
) -> Response:
    add_to_outbox(
        session, WEBHOOK_KIND, sample_event_message(course_webhook(session, course, webhook_id))
    )
    return _done(course.id, "test-sent")


@router.post("/courses/{course_id}/integrations/deliveries/{delivery_id}/retry")
def retry_delivery(
    delivery_id: int, session: SessionDep, course: InstructorCourseFormDep
) -> Response:
    """Send a failed delivery again (as it was: a score keeps its original timestamp)."""
    message = session.get(OutboxMessage, delivery_id)
    if (
        message is None
        or message.kind not in KIND_LABELS
        or message.payload.get("course_id") != course.id
    ):
        raise PageError(404, "Not found", "This course has no such delivery.")
    if message.status == OutboxStatus.FAILED:
        retry_outbox_message(session, message)
    return _done(course.id, "retried")


@router.post("/courses/{course_id}/integrations/roster")
def sync_roster_now(session: SessionDep, course: InstructorCourseFormDep) -> Response:
    contexts = session.scalars(select(LtiContext).where(LtiContext.course_id == course.id)).all()
    for context in contexts:
        if context.memberships_url:
            request_roster_sync(session, context)
    return _done(course.id, "roster")
