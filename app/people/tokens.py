"""Personal access tokens: how a learner's client (`loopgrade-client`, the notebook magic)
acts for them.

A token is a random secret shown once; only its SHA-256 is kept. It acts for its user alone:
it submits as them (the web form's rate limit and course rules apply) and reads their own
submissions and exercises, never anyone else's, whatever the user's role. It expires after
the lifetime chosen (at most `personal_token_max_days`) and can be revoked at once. Each use
is recorded on the token (`last_used_at`) and each submission names the token it came by.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import ColumnElement, and_, func, not_, select, update
from sqlalchemy.orm import Session

from app.db import SessionDep
from app.errors import AppError
from app.models import PersonalToken, User, utc_now

TOKEN_PREFIX = "lgp_"
MAX_TOKEN_NAME_CHARS = 100
# The lifetimes the tokens page offers, in days; the setting cuts off the longer ones.
LIFETIME_CHOICES_DAYS = (7, 30, 90, 365)
# The tokens page says where to make a new one; every refusal names it.
TOKENS_PAGE = "/account/tokens"
# Live (unrevoked, unexpired) tokens one account may hold: one per computer and notebook.
MAX_LIVE_TOKENS = 20
# Revoked and expired tokens the page lists besides the live ones, newest first.
MAX_DEAD_TOKENS_LISTED = 20


class TokenError(AppError):
    """A token that cannot be made as asked (a name, a lifetime)."""

    status_code = 422
    title = "Not created"


class TokenRefused(AppError):
    """No token, or one that is unknown, revoked or expired: 401, with what to do."""

    status_code = 401
    title = "Not signed in"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


def hash_token(secret: str) -> str:
    """Hex SHA-256. The secret has 256 random bits, so no salt or slow hash is needed."""
    return hashlib.sha256(secret.encode()).hexdigest()


def lifetime_choices_days(max_days: int) -> list[int]:
    """The lifetimes offered: the fixed choices up to `max_days`, and `max_days` itself."""
    return sorted({days for days in LIFETIME_CHOICES_DAYS if days <= max_days} | {max_days})


def create_personal_token(
    session: Session, user: User, *, name: str, lifetime_days: int, max_days: int
) -> tuple[PersonalToken, str]:
    """A new token for `user`; returns the row and the secret, which nothing stores."""
    name = name.strip()
    if not name:
        raise TokenError("name the token (the computer or notebook it is for)")
    if len(name) > MAX_TOKEN_NAME_CHARS:
        raise TokenError(f"the name is over {MAX_TOKEN_NAME_CHARS} characters")
    if lifetime_days not in lifetime_choices_days(max_days):
        raise TokenError(
            f"a token lasts one of {', '.join(map(str, lifetime_choices_days(max_days)))} days"
        )
    now = utc_now()
    if live_token_count(session, user) >= MAX_LIVE_TOKENS:
        raise TokenError(
            f"you have {MAX_LIVE_TOKENS} live tokens, the most an account may hold: revoke one "
            "you no longer use first"
        )
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = PersonalToken(
        user_id=user.id,
        name=name,
        token_hash=hash_token(secret),
        created_at=now,
        expires_at=now + timedelta(days=lifetime_days),
    )
    session.add(token)
    session.flush()
    return token, secret


def _live(user: User) -> tuple[ColumnElement[bool], ...]:
    return (
        PersonalToken.user_id == user.id,
        PersonalToken.revoked_at.is_(None),
        PersonalToken.expires_at > utc_now(),
    )


def live_token_count(session: Session, user: User) -> int:
    return session.scalar(select(func.count()).where(*_live(user))) or 0


def tokens_of(session: Session, user: User) -> list[PersonalToken]:
    """The user's live tokens, then the newest revoked and expired ones, each newest first."""
    newest_first = PersonalToken.created_at.desc()
    live = session.scalars(select(PersonalToken).where(*_live(user)).order_by(newest_first))
    dead = session.scalars(
        select(PersonalToken)
        .where(PersonalToken.user_id == user.id, not_(and_(*_live(user))))
        .order_by(newest_first)
        .limit(MAX_DEAD_TOKENS_LISTED)
    )
    return [*live, *dead]


def revoke_personal_tokens(session: Session, user: User) -> int:
    """Every live token of the user stops working at once; returns how many."""
    revoked = session.scalars(
        update(PersonalToken)
        .where(*_live(user))
        .values(revoked_at=utc_now())
        .returning(PersonalToken.id)
    ).all()
    session.flush()
    return len(revoked)


def revoke_personal_token(session: Session, user: User, token_id: str) -> PersonalToken | None:
    """The user's token stops working at once (its row and submissions stay); None if the
    user has no token with this id."""
    token = session.get(PersonalToken, token_id)
    if token is None or token.user_id != user.id:
        return None
    if token.revoked_at is None:
        token.revoked_at = utc_now()
        session.flush()
    return token


def _day(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d")


@dataclass(frozen=True)
class TokenHolder:
    """Who a request with a live token acts for: the user, and the token used."""

    user: User
    token: PersonalToken


def authenticate(session: Session, secret: str) -> TokenHolder:
    """The live token with this secret, its use recorded; TokenRefused says why not."""
    token = session.scalars(
        select(PersonalToken).where(PersonalToken.token_hash == hash_token(secret))
    ).one_or_none()
    renew = f"create a new one at {TOKENS_PAGE} and run 'loopgrade-client login' again"
    if token is None:
        raise TokenRefused(f"this token is not known here: {renew}")
    now = utc_now()
    user = session.get(User, token.user_id)
    if user is None:  # a user is never deleted while a token names them; said plainly anyway
        raise TokenRefused(f"this token's account no longer exists: {renew}")
    # Before revoked: disabling revokes the tokens too, and this is what the owner can act on.
    if user.disabled_at is not None:
        raise TokenRefused("this token's account is disabled: ask an administrator of this server")
    if token.revoked_at is not None:
        raise TokenRefused(f"this token was revoked on {_day(token.revoked_at)}: {renew}")
    if token.expires_at <= now:
        raise TokenRefused(f"this token expired on {_day(token.expires_at)}: {renew}")
    token.last_used_at = now
    return TokenHolder(user, token)


_bearer = HTTPBearer(auto_error=False, description=f"A personal access token from {TOKENS_PAGE}.")


def require_personal_token(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TokenHolder:
    """The learner the request acts for; 401 with a sentence when the token is missing or dead."""
    if credentials is None:
        raise TokenRefused(
            "missing token: send 'Authorization: Bearer <token>' with a personal access token "
            f"from {TOKENS_PAGE}"
        )
    return authenticate(session, credentials.credentials)


TokenHolderDep = Annotated[TokenHolder, Depends(require_personal_token)]
