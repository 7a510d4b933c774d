"""Local accounts: argon2 password hashes, creating users, signing in with failure limits.

These flush, never commit. A failed sign-in is recorded (flushed) and kept
(`keep_on_error_response`) before SignInRefused is raised: the request's transaction commits
it although the answer is a 401, so that the limit holds across requests and processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.db import keep_on_error_response
from app.errors import AppError
from app.models import (
    PasswordResetRequest,
    SignInFailure,
    SignUp,
    SiteRole,
    User,
    WebSession,
    utc_now,
)
from app.people.names import hidden_character, normalize_display_name
from app.people.tokens import revoke_personal_tokens
from app.rate_limits import RateLimit, seconds_until_allowed
from app.settings import Settings

MIN_PASSWORD_CHARS = 10
MAX_PASSWORD_CHARS = 1024
MAX_NAME_CHARS = 200
# One address may try many accounts (a campus NAT), so it gets more room than one email.
FAILURES_PER_ADDRESS_FACTOR = 5
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")

_hasher = PasswordHasher()
# Verified against when the email is unknown, so that both answers take the same time.
_DUMMY_HASH = _hasher.hash("not a password anyone has")


class AccountError(AppError, ValueError):
    """A bad email, name or password, or an email already taken; the message says which."""

    status_code = 422
    title = "Not accepted"


class SignInRefused(Exception):
    """Wrong email or password (deliberately not saying which)."""


class AccountDisabled(Exception):
    """The email and password are right, but an administrator disabled the account."""


class TooManySignIns(Exception):
    """Too many failed sign-ins lately; the message says whose; wait `retry_after_seconds`."""

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


def normalize_email(email: str) -> str:
    return email.strip().lower()


def check_email(email: str) -> str:
    """The email normalized; raises AccountError when it cannot be an address."""
    email = normalize_email(email)
    if len(email) > 255 or not _EMAIL.fullmatch(email):
        raise AccountError(f"{email[:255] or 'an empty email'!r} is not an email address")
    hidden = hidden_character(email)
    if hidden is not None:
        raise AccountError(f"the email contains {hidden}, which does not show: remove it")
    return email


def check_display_name(name: str) -> str:
    """The name as kept and shown (`app.people.names`); raises AccountError when it hides text."""
    name = normalize_display_name(name)
    if len(name) > MAX_NAME_CHARS:
        raise AccountError(f"the name may have at most {MAX_NAME_CHARS} characters")
    hidden = hidden_character(name)
    if hidden is not None:
        raise AccountError(
            f"the name contains {hidden}, which does not show as itself: remove it, so that "
            "your name looks like no one else's"
        )
    return name


def check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_CHARS:
        raise AccountError(f"the password needs at least {MIN_PASSWORD_CHARS} characters")
    if len(password) > MAX_PASSWORD_CHARS:
        raise AccountError(f"the password may have at most {MAX_PASSWORD_CHARS} characters")


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def find_user_by_email(session: Session, email: str) -> User | None:
    return session.scalars(select(User).where(User.email == normalize_email(email))).one_or_none()


def create_user(
    session: Session,
    *,
    email: str,
    name: str,
    password: str,
    site_role: SiteRole = SiteRole.LEARNER,
) -> User:
    """A new account; raises AccountError for a bad field or an email already in use."""
    email = check_email(email)
    name = check_display_name(name or email.split("@")[0])
    check_password(password)
    if find_user_by_email(session, email) is not None:
        raise AccountError(f"there is already an account for {email}")
    user = User(email=email, name=name, password_hash=hash_password(password), site_role=site_role)
    session.add(user)
    session.flush()
    return user


class TooManySignUps(AppError):
    """Accounts made by sign-up within the window reached a limit: from this client address
    (429), or from all (503). Wait `retry_after_seconds`."""

    title = "Too many new accounts"

    def __init__(self, message: str, retry_after_seconds: int, *, status_code: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_seconds)})
        self.status_code = status_code
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True)
class SignUpLimits:
    """Accounts anyone may make through the open sign-up form, each in the same window: from
    one client address, and from all (every account is a row kept for good)."""

    per_address: RateLimit
    in_total: RateLimit

    @classmethod
    def from_settings(cls, settings: Settings) -> SignUpLimits:
        window = settings.sign_up_window_seconds
        return cls(
            per_address=RateLimit(settings.sign_up_max_per_address, window),
            in_total=RateLimit(settings.sign_up_max, window),
        )


def sign_up(
    session: Session,
    *,
    email: str,
    name: str,
    password: str,
    client_address: str,
    limits: SignUpLimits,
) -> User:
    """A new learner account made by its owner (`create_user`), counted for `limits`.

    Raises TooManySignUps before anything else when a limit is reached, AccountError for a
    bad field. Sign-ups that left the window are swept."""
    client_address = client_address[:64]
    brakes = [
        (limits.per_address, [SignUp.client_address == client_address], 429, "your network"),
        (limits.in_total, [], 503, "everywhere"),
    ]
    for limit, conditions, status_code, where in brakes:
        retry_after = seconds_until_allowed(session, limit, SignUp.signed_up_at, *conditions)
        if retry_after is not None:
            raise TooManySignUps(
                f"Too many accounts were made from {where} in the last while. Try again in "
                f"{max(1, round(retry_after / 60))} minutes.",
                retry_after,
                status_code=status_code,
            )
    user = create_user(session, email=email, name=name, password=password)
    now = utc_now()
    session.add(SignUp(client_address=client_address, signed_up_at=now))
    longest = max(limits.per_address.window_seconds, limits.in_total.window_seconds)
    session.execute(delete(SignUp).where(SignUp.signed_up_at < now - timedelta(seconds=longest)))
    session.flush()
    return user


@dataclass(frozen=True)
class SignInLimits:
    """Failed sign-ins allowed before a pause, each counted in its own sliding window.

    Keyed so that a stranger cannot lock the owner out: failures to one account count per
    client address, and one address gets more room over all accounts (a campus NAT). The
    slower brake on one account from everywhere (many addresses guessing one password) does
    not stop a browser that signed in to that account before (`known_browser`).
    """

    per_account_and_address: RateLimit
    per_address: RateLimit
    per_account: RateLimit

    @classmethod
    def from_settings(cls, settings: Settings) -> SignInLimits:
        window = settings.sign_in_window_seconds
        return cls(
            per_account_and_address=RateLimit(settings.sign_in_max_failures, window),
            per_address=RateLimit(
                settings.sign_in_max_failures * FAILURES_PER_ADDRESS_FACTOR, window
            ),
            per_account=RateLimit(
                settings.sign_in_account_max_failures, settings.sign_in_account_window_seconds
            ),
        )


def check_sign_in_limits(
    session: Session,
    limits: SignInLimits,
    *,
    email: str,
    client_address: str,
    known_browser: bool,
) -> None:
    """Raise TooManySignIns when a limit on failures that this attempt falls under is reached."""
    by_account, by_address = SignInFailure.email == email, SignInFailure.client_ip == client_address
    brakes = [
        (
            limits.per_account_and_address,
            [by_account, by_address],
            "Too many failed sign-ins to this account from your network.",
        ),
        (limits.per_address, [by_address], "Too many failed sign-ins from your network."),
    ]
    if not known_browser:
        brakes.append(
            (
                limits.per_account,
                [by_account],
                "Too many failed sign-ins to this account from many places. For its safety, "
                "only a browser that signed in to it before can sign in now.",
            )
        )
    for limit, conditions, message in brakes:
        retry_after = seconds_until_allowed(session, limit, SignInFailure.failed_at, *conditions)
        if retry_after is not None:
            raise TooManySignIns(message, retry_after)


def sign_in(
    session: Session,
    *,
    email: str,
    password: str,
    client_address: str,
    limits: SignInLimits,
    known_browser: bool = False,
) -> User:
    """The user with this email and password.

    Raises TooManySignIns before checking anything when failures that this attempt falls
    under reached a limit (`SignInLimits`); SignInRefused when the pair is wrong.
    """
    email = normalize_email(email)
    client_address = client_address[:64]
    # Failures out of every window are only clutter: swept on every attempt, so that a stream
    # of failures with no success between keeps no more than the windows count.
    longest = max(limits.per_address.window_seconds, limits.per_account.window_seconds)
    session.execute(
        delete(SignInFailure).where(
            SignInFailure.failed_at < utc_now() - timedelta(seconds=2 * longest)
        )
    )
    check_sign_in_limits(
        session, limits, email=email, client_address=client_address, known_browser=known_browser
    )

    user = find_user_by_email(session, email)
    if user is None:
        verify_password(_DUMMY_HASH, password)
    if user is None or not verify_password(user.password_hash, password):
        session.add(SignInFailure(email=email[:255], client_ip=client_address))
        session.flush()
        keep_on_error_response(session)
        raise SignInRefused()

    if user.disabled_at is not None:
        raise AccountDisabled()
    if _hasher.check_needs_rehash(user.password_hash):
        user.password_hash = hash_password(password)
    # Only this address's failures are forgiven: others' still count toward the brakes.
    session.execute(
        delete(SignInFailure).where(
            SignInFailure.email == email, SignInFailure.client_ip == client_address
        )
    )
    session.flush()
    return user


# What an account made by an LMS launch has instead of a hash (app.integrations.provisioning): no
# password matches it until its owner sets one through a reset link.
NO_PASSWORD = "!lti"


def has_password(user: User) -> bool:
    return user.password_hash != NO_PASSWORD


def set_password(session: Session, user: User, password: str) -> None:
    """The one way a password changes: it also voids the account's reset links."""
    check_password(password)
    user.password_hash = hash_password(password)
    session.execute(
        delete(PasswordResetRequest).where(
            PasswordResetRequest.user_id == user.id, PasswordResetRequest.used_at.is_(None)
        )
    )
    session.flush()


def change_password(session: Session, user: User, *, current: str, new: str) -> None:
    """The owner's change, which needs the current password; raises AccountError."""
    if not verify_password(user.password_hash, current):
        raise AccountError("the current password is not right")
    set_password(session, user, new)


def end_sessions(session: Session, user: User, *, except_session_id: str | None = None) -> int:
    """Sign the account out of every browser (but one), and revoke its personal tokens: a
    password reset or change, "sign out everywhere else" and disabling all end both, so that
    whoever held either loses it. Returns how many sessions ended."""
    query = delete(WebSession).where(WebSession.user_id == user.id)
    if except_session_id is not None:
        query = query.where(WebSession.id != except_session_id)
    ended = session.scalars(query.returning(WebSession.id)).all()
    revoke_personal_tokens(session, user)
    session.flush()
    return len(ended)


def live_sessions(session: Session, user: User) -> list[WebSession]:
    """The account's signed-in browsers, newest first."""
    return list(
        session.scalars(
            select(WebSession)
            .where(WebSession.user_id == user.id, WebSession.expires_at > utc_now())
            .order_by(WebSession.created_at.desc())
        )
    )


def disable_user(session: Session, user: User) -> int:
    """The account cannot sign in any more; its sessions end. Returns how many ended."""
    if user.disabled_at is None:
        user.disabled_at = utc_now()
    return end_sessions(session, user)


def enable_user(session: Session, user: User) -> None:
    user.disabled_at = None
    session.flush()
