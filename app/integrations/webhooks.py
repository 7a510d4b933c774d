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
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import SessionFactory
from app.integrations.delivery_errors import PlatformRefused, PlatformUnavailable
from app.integrations.models import Webhook
from app.models import Submission, utc_now
from app.outbox import PermanentFailure, add_to_outbox
from app.settings import Settings

SIGNATURE_HEADER = "Loopgrade-Signature"
WEBHOOK_KIND = "webhook"
HTTP_TIMEOUT_SECONDS = 10.0
MAX_ERROR_CHARS = 300


class WebhookEvent(enum.StrEnum):
    SUBMISSION_GRADED = "submission.graded"
    TEST = "test"


class WebhookError(ValueError):
    """A webhook that cannot be added; the message says what to change."""


class WebhookAddressRefused(Exception):
    """The webhook's host has, or now resolves to, an address webhooks may not reach."""


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")


def resolve_host(host: str) -> list[IPAddress]:
    """Every address `host` resolves to (an IP literal is its own). Raises OSError."""
    found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(entry[4][0]) for entry in found))


def is_internal(address: IPAddress) -> bool:
    """Loopback, private, link-local, shared (100.64/10), unique-local, reserved, multicast or
    unspecified: anything but a public unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        # ::ffff:127.0.0.1, 2002:7f00:1:: (6to4) and 64:ff9b::7f00:1 (NAT64) are IPv4
        # addresses in IPv6 clothes.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in NAT64_PREFIX:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and is_internal(embedded):
            return True
    return not address.is_global or address.is_multicast


def checked_address(host: str, *, allow_private_addresses: bool) -> IPAddress:
    """The address to connect to for `host`: resolved once here, and refused when any address
    it resolves to is internal (a name that answers a public and a private address is
    refused too: which one a connection would get is up to the resolver)."""
    try:
        addresses = resolve_host(host)
    except (OSError, UnicodeError, ValueError) as exc:
        raise OSError(f"{host} cannot be resolved ({exc})") from None
    internal = [] if allow_private_addresses else [str(a) for a in addresses if is_internal(a)]
    if internal or not addresses:
        raise WebhookAddressRefused(
            f"{host} resolves to {', '.join(internal) or 'no address'}, a private or loopback "
            "address; webhooks go to other servers (an operator can allow it with "
            "LOOPGRADE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES)"
        )
    return addresses[0]


def check_webhook_url(url: str, *, allow_private_addresses: bool) -> str:
    """An https URL whose host resolves to public addresses only. With the operator's
    `allow_private_addresses` (tests, development) any http(s) URL is accepted."""
    url = url.strip()
    parts = urlsplit(url)
    if not parts.hostname or parts.scheme not in ("https", "http") or len(url) > 1000:
        raise WebhookError(f"the webhook URL must be an absolute https:// URL, not {url!r}")
    try:
        parts.port  # noqa: B018 (it raises on a port that is not a number in range)
    except ValueError:
        raise WebhookError(f"the webhook URL has an invalid port: {url!r}") from None
    if parts.scheme == "http" and not allow_private_addresses:
        raise WebhookError("the webhook URL must use https://")
    try:
        checked_address(parts.hostname, allow_private_addresses=allow_private_addresses)
    except WebhookAddressRefused as exc:
        raise WebhookError(str(exc)) from None
    except OSError as exc:
        raise WebhookError(f"{exc}: check the host name in the webhook URL") from None
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


def pinned_request(url: str, *, allow_private_addresses: bool) -> tuple[str, dict[str, Any]]:
    """The URL to connect to and the request options that keep the webhook's host name.

    The host is resolved and checked here, and the connection goes to that very address (the
    name stays in the Host header and, over TLS, in SNI and the certificate check): a DNS
    answer that changed since (rebinding) cannot send the POST to an internal address.
    """
    parsed = httpx.URL(url)
    try:
        address = checked_address(parsed.host, allow_private_addresses=allow_private_addresses)
    except WebhookAddressRefused as exc:
        raise PlatformRefused(str(exc)) from None
    except OSError as exc:
        raise PlatformUnavailable(str(exc)) from None
    return str(parsed.copy_with(host=str(address))), {
        "headers": {"Host": parsed.netloc.decode("ascii")},
        "extensions": {"sni_hostname": parsed.host},
    }


def deliver_webhook(
    session: Session, payload: dict[str, Any], *, allow_private_addresses: bool
) -> None:
    """POST one event, signed now. Raises PlatformUnavailable (retry) or PlatformRefused."""
    webhook = session.get(Webhook, payload["webhook_id"])
    if webhook is None or webhook.revoked_at is not None:
        raise PlatformRefused("the webhook was removed")
    body = json.dumps(payload["event"], separators=(",", ":")).encode()
    target, pinning = pinned_request(webhook.url, allow_private_addresses=allow_private_addresses)
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(webhook.secret, int(time.time()), body),
        "User-Agent": "loopgrade-webhooks",
        **pinning.get("headers", {}),
    }
    try:
        with httpx.Client(timeout=HTTP_TIMEOUT_SECONDS, follow_redirects=False) as client:
            reply = client.post(
                target, content=body, headers=headers, extensions=pinning.get("extensions")
            )
    except httpx.HTTPError as exc:
        raise PlatformUnavailable(f"POST {webhook.url}: {exc}") from None
    problem = f"POST {webhook.url}: HTTP {reply.status_code}: {reply.text[:MAX_ERROR_CHARS]}"
    if reply.status_code in (408, 425, 429) or reply.status_code >= 500:
        raise PlatformUnavailable(problem)
    if reply.status_code >= 300:
        raise PlatformRefused(problem)


def deliver_webhook_message(
    sessions: SessionFactory, settings: Settings, payload: dict[str, Any]
) -> None:
    with sessions() as session:
        try:
            deliver_webhook(
                session,
                payload,
                allow_private_addresses=settings.webhook_allow_private_addresses,
            )
        except PlatformRefused as exc:
            raise PermanentFailure(str(exc)) from None


def send_to_webhooks(session: Session, submission: Submission) -> None:
    """A graded submission in a course: an event for each of the course's webhooks."""
    for message in graded_messages(session, submission):
        add_to_outbox(session, WEBHOOK_KIND, message)
