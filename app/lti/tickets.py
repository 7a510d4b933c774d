"""One-time tickets that hand a launch's sign-in to a browser, and the cookie it gets.

A launch ends in a redirect to `/lti/enter?ticket=...`: the ticket (used once, short-lived)
starts a web session there. Inside a cross-site iframe the session cookie is `Partitioned`
(CHIPS) and `SameSite=None; Secure`, which browsers that block third-party cookies still
keep per embedding site; where even that is refused, the page offers a new window, which a
second ticket opens.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from fastapi import Request, Response
from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from app.access import SESSION_COOKIE, get_secret_key, sign
from app.integrations.models import LtiLaunchTicket
from app.integrations.platforms import is_loopback_host
from app.models import User, utc_now
from app.settings import Settings

TICKET_LIFETIME = timedelta(minutes=5)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_ticket(session: Session, user: User, target_path: str, *, lms_origin: str) -> str:
    """A one-time ticket signing `user` in and going to `target_path` (a path on this site),
    for a launch from the LMS page at `lms_origin`."""
    token = secrets.token_urlsafe(32)
    now = utc_now()
    session.add(
        LtiLaunchTicket(
            token_hash=_hash(token),
            user_id=user.id,
            target_path=target_path,
            lms_origin=lms_origin,
            expires_at=now + TICKET_LIFETIME,
        )
    )
    session.execute(
        delete(LtiLaunchTicket).where(LtiLaunchTicket.expires_at < now - TICKET_LIFETIME)
    )
    session.flush()
    return token


def redeem_ticket(session: Session, token: str) -> LtiLaunchTicket | None:
    """The ticket, marked used; None if unknown, expired or used before."""
    if not token or len(token) > 100:
        return None
    row = session.execute(
        update(LtiLaunchTicket)
        .where(
            LtiLaunchTicket.token_hash == _hash(token),
            LtiLaunchTicket.used_at.is_(None),
            LtiLaunchTicket.expires_at > utc_now(),
        )
        .values(used_at=utc_now())
        .returning(LtiLaunchTicket.user_id, LtiLaunchTicket.target_path, LtiLaunchTicket.lms_origin)
        .execution_options(synchronize_session=False)
    ).one_or_none()
    if row is None:
        return None
    return LtiLaunchTicket(
        user_id=row.user_id, target_path=row.target_path, lms_origin=row.lms_origin
    )


def _is_secure_context(request: Request) -> bool:
    # Browsers accept Secure cookies over https, and over plain http from loopback only.
    return request.url.scheme == "https" or is_loopback_host(request.url.hostname or "")


def set_framed_session_cookie(
    response: Response, request: Request, settings: Settings, token: str
) -> None:
    """The session cookie for a page an LMS frames: Partitioned, SameSite=None, Secure
    where the browser can keep such a cookie, else the site's usual cookie."""
    framed = _is_secure_context(request)
    response.set_cookie(
        SESSION_COOKIE,
        sign(get_secret_key(request), "session", token),
        max_age=settings.session_max_age_seconds,
        httponly=True,
        samesite="none" if framed else settings.cookie_samesite,
        secure=framed,
    )
    if framed:
        # Python before 3.14 cannot write the attribute (starlette refuses it): add it here.
        name, value = response.raw_headers[-1]
        assert name == b"set-cookie"
        response.raw_headers[-1] = (name, value + b"; Partitioned")
