"""Course webhooks: every graded submission POSTed, signed, to the course's subscribers.

The signature covers the timestamp and the body, so a captured delivery cannot be replayed
later as a new one: `Loopgrade-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
"<t>.<body>" under the webhook's secret>`. Receivers check the HMAC and refuse a `t` older
than a few minutes (docs/api.md shows how).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import json
import secrets
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import SessionFactory
from app.lti.ags import PlatformRefused, PlatformUnavailable
from app.lti.models import Webhook
from app.models import Submission, utc_now
from app.outbox import PermanentFailure, add_to_outbox, delivery_kind, on_graded

SIGNATURE_HEADER = "Loopgrade-Signature"
WEBHOOK_KIND = "webhook"
HTTP_TIMEOUT_SECONDS = 10.0
MAX_ERROR_CHARS = 300


class WebhookEvent(enum.StrEnum):
    SUBMISSION_GRADED = "submission.graded"
    TEST = "test"


class WebhookError(ValueError):
    """A webhook that cannot be added; the message says what to change."""


def check_webhook_url(url: str, *, allow_private_addresses: bool) -> str:
    """An https URL; not a private or loopback address unless the operator allows them."""
    url = url.strip()
    parts = urlsplit(url)
    if not parts.hostname or parts.scheme not in ("https", "http") or len(url) > 1000:
        raise WebhookError(f"the webhook URL must be an absolute https:// URL, not {url!r}")
    try:
        address = ipaddress.ip_address(parts.hostname)
    except ValueError:
        address = None
    private = parts.hostname == "localhost" or (address is not None and not address.is_global)
    if private and not allow_private_addresses:
        raise WebhookError(
            f"{parts.hostname} is a private or loopback address; webhooks go to other "
            "servers (an operator can allow it with LOOPGRADE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES)"
        )
    if parts.scheme == "http" and not private:
        raise WebhookError("the webhook URL must use https://")
    return url


def create_webhook(
    session: Session, *, course_id: str, url: str, allow_private_addresses: bool
) -> Webhook:
    webhook = Webhook(
        course_id=course_id,
        url=check_webhook_url(url, allow_private_addresses=allow_private_addresses),
        secret="whsec_" + secrets.token_urlsafe(32),
    )
    session.add(webhook)
    session.flush()
    return webhook


def webhooks_of(session: Session, course_id: str) -> list[Webhook]:
    return list(
        session.scalars(
            select(Webhook)
            .where(Webhook.course_id == course_id, Webhook.revoked_at.is_(None))
            .order_by(Webhook.created_at)
        )
    )


def revoke_webhook(session: Session, webhook: Webhook) -> None:
    webhook.revoked_at = utc_now()
    session.flush()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def _event(webhook: Webhook, event: WebhookEvent, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "webhook_id": webhook.id,
        "course_id": webhook.course_id,
        "event": {
            "id": secrets.token_urlsafe(12),
            "type": event.value,
            "created_at": utc_now().isoformat(),
            "course_id": webhook.course_id,
            "data": data,
        },
    }


def graded_messages(session: Session, submission: Submission) -> list[dict[str, Any]]:
    """One outbox payload per live webhook of the submission's course."""
    if submission.course_id is None:
        return []
    data = {
        "submission_id": submission.id,
        "exercise": submission.exercise_id,
        "learner": submission.learner,
        "status": submission.status,
        "score": submission.score,
        "max_score": submission.max_score,
        "diagnosis": submission.diagnosis,
        "graded_at": submission.graded_at.isoformat() if submission.graded_at else None,
    }
    return [
        _event(webhook, WebhookEvent.SUBMISSION_GRADED, data)
        for webhook in webhooks_of(session, submission.course_id)
    ]


def sample_event_message(webhook: Webhook) -> dict[str, Any]:
    return _event(webhook, WebhookEvent.TEST, {"message": "a test event from loopgrade"})


def deliver_webhook(session: Session, payload: dict[str, Any]) -> None:
    """POST one event, signed now. Raises PlatformUnavailable (retry) or PlatformRefused."""
    webhook = session.get(Webhook, payload["webhook_id"])
    if webhook is None or webhook.revoked_at is not None:
        raise PlatformRefused("the webhook was removed")
    body = json.dumps(payload["event"], separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(webhook.secret, int(time.time()), body),
        "User-Agent": "loopgrade-webhooks",
    }
    try:
        reply = httpx.post(
            webhook.url,
            content=body,
            headers=headers,
            timeout=HTTP_TIMEOUT_SECONDS,
            follow_redirects=False,
        )
    except httpx.HTTPError as exc:
        raise PlatformUnavailable(f"POST {webhook.url}: {exc}") from None
    problem = f"POST {webhook.url}: HTTP {reply.status_code}: {reply.text[:MAX_ERROR_CHARS]}"
    if reply.status_code in (408, 425, 429) or reply.status_code >= 500:
        raise PlatformUnavailable(problem)
    if reply.status_code >= 300:
        raise PlatformRefused(problem)


@delivery_kind(WEBHOOK_KIND)
def deliver_webhook_message(sessions: SessionFactory, payload: dict[str, Any]) -> None:
    with sessions() as session:
        try:
            deliver_webhook(session, payload)
        except PlatformRefused as exc:
            raise PermanentFailure(str(exc)) from None


@on_graded
def send_to_webhooks(session: Session, submission_id: str) -> None:
    """A graded submission in a course: an event for each of the course's webhooks."""
    submission = session.get(Submission, submission_id)
    for message in graded_messages(session, submission) if submission is not None else []:
        add_to_outbox(session, WEBHOOK_KIND, message)
