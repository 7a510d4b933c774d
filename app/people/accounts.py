"""Local accounts: argon2 password hashes, creating users, signing in with a failure limit.

These flush, never commit. A failed sign-in is recorded (flushed) and kept
(`keep_on_error_response`) before SignInRefused is raised: the request's transaction commits
it although the answer is a 401, so that the limit holds across requests and processes.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.db import keep_on_error_response
from app.errors import AppError
from app.models import SignInFailure, SiteRole, User, utc_now

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


class TooManySignIns(Exception):
    """Too many failed sign-ins lately; try again after `retry_after_seconds`."""

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(f"too many failed sign-ins; try again in {retry_after_seconds} s")
        self.retry_after_seconds = retry_after_seconds


def normalize_email(email: str) -> str:
    return email.strip().lower()


def check_email(email: str) -> str:
    """The email normalized; raises AccountError when it cannot be an address."""
    email = normalize_email(email)
    if len(email) > 255 or not _EMAIL.fullmatch(email):
        raise AccountError(f"{email or 'an empty email'!r} is not an email address")
    return email


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
    name = " ".join(name.split()) or email.split("@")[0]
    if len(name) > MAX_NAME_CHARS:
        raise AccountError(f"the name may have at most {MAX_NAME_CHARS} characters")
    check_password(password)
    if find_user_by_email(session, email) is not None:
        raise AccountError(f"there is already an account for {email}")
    user = User(email=email, name=name, password_hash=hash_password(password), site_role=site_role)
    session.add(user)
    session.flush()
    return user


def _retry_after(session: Session, condition: object, limit: int, window: timedelta) -> int | None:
    since = utc_now() - window
    failures = session.scalars(
        select(SignInFailure.failed_at)
        .where(condition, SignInFailure.failed_at > since)  # type: ignore[arg-type]
        .order_by(SignInFailure.failed_at.desc())
        .limit(limit)
    ).all()
    if len(failures) < limit:
        return None
    # Free again once the oldest of the last `limit` failures leaves the window.
    seconds = (failures[-1] + window - utc_now()).total_seconds()
    return max(1, math.ceil(seconds))


def sign_in(
    session: Session,
    *,
    email: str,
    password: str,
    client_ip: str,
    max_failures: int,
    window_seconds: int,
) -> User:
    """The user with this email and password.

    Raises TooManySignIns before checking anything when this email (or this address, with
    more room) failed too often within the window; SignInRefused when the pair is wrong.
    """
    email = normalize_email(email)
    window = timedelta(seconds=window_seconds)
    for condition, limit in (
        (SignInFailure.email == email, max_failures),
        (SignInFailure.client_ip == client_ip, max_failures * FAILURES_PER_ADDRESS_FACTOR),
    ):
        retry_after = _retry_after(session, condition, limit, window)
        if retry_after is not None:
            raise TooManySignIns(retry_after)

    user = find_user_by_email(session, email)
    if user is None:
        verify_password(_DUMMY_HASH, password)
    if user is None or not verify_password(user.password_hash, password):
        session.add(SignInFailure(email=email[:255], client_ip=client_ip[:64]))
        session.flush()
        keep_on_error_response(session)
        raise SignInRefused()

    if _hasher.check_needs_rehash(user.password_hash):
        user.password_hash = hash_password(password)
    session.execute(delete(SignInFailure).where(SignInFailure.email == email))
    # Old failures of everyone are only clutter once out of every window.
    session.execute(delete(SignInFailure).where(SignInFailure.failed_at < utc_now() - window * 2))
    session.flush()
    return user


def count_users(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(User)) or 0
