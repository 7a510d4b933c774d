"""Password reset by a link mailed to the account's email.

A request is a row, whether or not an account has the email, so that the limits count alike
and the answer says nothing of who has an account. The link's token is `<row id>.<secret>`:
the row is found by id and only the secret's SHA-256 is kept, compared in constant time.
A link works once, until it expires, and not after the password changed (`set_password`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.audit import AuditAction, record_event
from app.errors import AppError
from app.models import PasswordResetRequest, User, utc_now
from app.people.accounts import end_sessions, find_user_by_email, normalize_email, set_password
from app.rate_limits import RateLimit, seconds_until_allowed
from app.settings import Settings


class TooManyResetRequests(AppError):
    """Reset links asked from one client address reached the limit."""

    status_code = 429
    title = "Too many reset requests"

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_seconds)})
        self.retry_after_seconds = retry_after_seconds


class ResetLinkInvalid(AppError):
    status_code = 400
    title = "This reset link does not work"

    def __init__(self) -> None:
        super().__init__(
            "The link was used already, has expired, or the password was changed since it "
            "was sent. Ask for a new link."
        )


@dataclass(frozen=True)
class ResetLimits:
    """What bounds reset requests: the requester's (one client address, within one window),
    never the account's, which anyone can name; and the links one account has working at once,
    which bound the mail it gets without stopping its owner (who holds a working link)."""

    per_address: RateLimit
    live_links_per_account: int
    link_max_age_seconds: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ResetLimits:
        return cls(
            per_address=RateLimit(
                settings.password_reset_max_per_address, settings.password_reset_window_seconds
            ),
            live_links_per_account=settings.password_reset_max_live_links,
            link_max_age_seconds=settings.password_reset_max_age_seconds,
        )


@dataclass(frozen=True)
class ResetLink:
    """What to mail: to whom, and the token the link carries (never stored)."""

    user: User
    token: str


def _secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def request_password_reset(
    session: Session, *, email: str, client_address: str, limits: ResetLimits
) -> ResetLink | None:
    """Record a "forgot password" request; the link to mail when an enabled account has the
    email and fewer working links than the limit, else None. Raises TooManyResetRequests
    (for any email alike) when the requester's address reached its limit."""
    email = normalize_email(email)[:255]
    client_address = client_address[:64]
    longest = max(limits.per_address.window_seconds, limits.link_max_age_seconds)
    session.execute(
        delete(PasswordResetRequest).where(
            PasswordResetRequest.requested_at < utc_now() - timedelta(seconds=2 * longest)
        )
    )
    retry_after = seconds_until_allowed(
        session,
        limits.per_address,
        PasswordResetRequest.requested_at,
        PasswordResetRequest.client_address == client_address,
    )
    if retry_after is not None:
        raise TooManyResetRequests(
            "Too many reset links were asked for from your network lately. Try again in "
            f"{max(1, round(retry_after / 60))} minutes.",
            retry_after,
        )
    user = find_user_by_email(session, email)
    if (
        user is None
        or user.disabled_at is not None
        or live_reset_links(session, user) >= limits.live_links_per_account
    ):
        session.add(PasswordResetRequest(email=email, client_address=client_address))
        session.flush()
        return None
    return issue_reset_link(
        session, user, client_address=client_address, max_age_seconds=limits.link_max_age_seconds
    )


def live_reset_links(session: Session, user: User) -> int:
    """The account's reset links that still work (mailed, unused, not expired)."""
    return (
        session.scalar(
            select(func.count()).where(
                PasswordResetRequest.user_id == user.id,
                PasswordResetRequest.token_hash.is_not(None),
                PasswordResetRequest.used_at.is_(None),
                PasswordResetRequest.expires_at > utc_now(),
            )
        )
        or 0
    )


def issue_reset_link(
    session: Session, user: User, *, client_address: str, max_age_seconds: int
) -> ResetLink:
    """A new reset link for `user` (no limit: the callers count)."""
    secret = secrets.token_urlsafe(32)
    request = PasswordResetRequest(
        email=user.email,
        client_address=client_address[:64],
        user_id=user.id,
        token_hash=_secret_hash(secret),
        expires_at=utc_now() + timedelta(seconds=max_age_seconds),
    )
    session.add(request)
    session.flush()
    return ResetLink(user, f"{request.id}.{secret}")


def reset_url(base_url: str, token: str) -> str:
    """The link to mail: the page at `base_url` that takes the token."""
    return f"{base_url.rstrip('/')}/reset-password?token={quote(token)}"


def find_reset_request(session: Session, token: str) -> PasswordResetRequest | None:
    """The live, unused request whose link carries `token`, or None."""
    request_id, _, secret = token.partition(".")
    if not request_id.isdigit() or len(request_id) > 18 or not secret:
        return None
    request = session.get(PasswordResetRequest, int(request_id))
    if request is None or request.token_hash is None or request.expires_at is None:
        return None
    if not hmac.compare_digest(request.token_hash, _secret_hash(secret)):
        return None
    if request.used_at is not None or request.expires_at <= utc_now():
        return None
    return request


def reset_password(session: Session, *, token: str, password: str) -> User:
    """Set the password of the link's account, use the link up, and end every session of the
    account (audited). Raises ResetLinkInvalid, or AccountError for a bad password."""
    request = find_reset_request(session, token)
    user = session.get(User, request.user_id) if request and request.user_id else None
    if request is None or user is None or user.disabled_at is not None:
        raise ResetLinkInvalid()
    request.used_at = utc_now()
    set_password(session, user, password)
    ended = end_sessions(session, user)
    record_event(
        session,
        actor=user,
        action=AuditAction.PASSWORD_RESET,
        email=user.email,
        sessions_ended=ended,
    )
    return user


def reset_mail_body(*, name: str, link: str, max_age_seconds: int) -> str:
    minutes = max_age_seconds // 60
    return (
        f"Hello {name},\n\n"
        "Someone (we hope you) asked to set a new password for your loopgrade account.\n"
        f"Open this link within {minutes} minutes to choose one; it works once:\n\n"
        f"{link}\n\n"
        "If you did not ask, ignore this mail: your password stays as it is.\n"
    )
