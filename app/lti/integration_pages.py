"""A course's integrations page, for its instructors: REST API keys, webhooks (with a test
event and the delivery log), the LMS links and the grade passback that failed (to retry)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.keys import create_api_key, keys_of_course, revoke_api_key
from app.db import SessionDep
from app.lti.models import LtiContext, LtiResourceLink, Webhook
from app.lti.webhooks import WebhookError, create_webhook, revoke_webhook, webhooks_of
from app.models import ApiKey, Course
from app.settings import SettingsDep
from app.web.instructor_pages import instructor_course
from app.web.rendering import PageError, render
from app.web.sessions import CsrfViewerDep, Viewer, ViewerDep

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

DONE_MESSAGES = {
    "key-revoked": "API key revoked: it is refused from now on.",
    "webhook-removed": "Webhook removed: nothing more is sent to it.",
    "webhook-added": "Webhook added. Its signing secret is shown below.",
    "test-sent": "Test event queued: it appears in the delivery log once sent.",
    "retried": "Queued again: it is sent within a few seconds.",
}


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
    return render(request, viewer, "lti/integrations.html", context, status_code=status_code)


def _done(course_id: str, done: str) -> Response:
    return RedirectResponse(f"/courses/{course_id}/integrations?done={done}", status_code=303)


@router.get("/courses/{course_id}/integrations")
def integrations_page(
    request: Request, course_id: str, session: SessionDep, viewer: ViewerDep, done: str = ""
) -> HTMLResponse:
    _, course = instructor_course(session, viewer, course_id)
    return _page(request, session, viewer, course, notice=DONE_MESSAGES.get(done))


@router.post("/courses/{course_id}/integrations/keys")
def add_api_key(
    request: Request,
    course_id: str,
    session: SessionDep,
    viewer: CsrfViewerDep,
    name: Annotated[str, Form()] = "",
) -> Response:
    _, course = instructor_course(session, viewer, course_id)
    name = " ".join(name.split())[:200]
    if not name:
        return _page(
            request, session, viewer, course, status_code=422, error="Name the key (who uses it)."
        )
    api_key, secret = create_api_key(session, name=name, course_id=course.id)
    # Shown once, in this answer only; only its hash is kept.
    return _page(request, session, viewer, course, new_key=(api_key, secret))


@router.post("/courses/{course_id}/integrations/keys/{key_id}/revoke")
def revoke_key(course_id: str, key_id: str, session: SessionDep, viewer: CsrfViewerDep) -> Response:
    _, course = instructor_course(session, viewer, course_id)
    api_key = session.get(ApiKey, key_id)
    if api_key is None or api_key.course_id != course.id:
        raise PageError(404, "Not found", "This course has no such API key.")
    revoke_api_key(session, api_key)
    return _done(course.id, "key-revoked")


@router.post("/courses/{course_id}/integrations/webhooks")
def add_webhook(
    request: Request,
    course_id: str,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    url: Annotated[str, Form()] = "",
) -> Response:
    _, course = instructor_course(session, viewer, course_id)
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
    course_id: str, webhook_id: str, session: SessionDep, viewer: CsrfViewerDep
) -> Response:
    _, course = instructor_course(session, viewer, course_id)
    revoke_webhook(session, course_webhook(session, course, webhook_id))
    return _done(course.id, "webhook-removed")
