"""API keys: a random secret shown once, its SHA-256 kept, presented as `Authorization: Bearer`."""

from __future__ import annotations

import hashlib
import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from app.db import SessionDep
from app.models import ApiKey, utc_now

KEY_PREFIX = "lg_"


def hash_api_key(secret: str) -> str:
    """Hex SHA-256 of the key. The secret has 256 random bits, so no salt or slow hash is needed."""
    return hashlib.sha256(secret.encode()).hexdigest()


def create_api_key(
    session: Session, *, name: str, course_id: str | None = None
) -> tuple[ApiKey, str]:
    """A new key named `name`, for one course (or none, as before courses); returns the row
    and the secret, which nothing stores."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey(name=name, key_hash=hash_api_key(secret), course_id=course_id)
    session.add(api_key)
    session.flush()
    return api_key, secret


# Built once: every API request runs it, and building the statement and its cache key each
# time took two fifths of the lookup's CPU (docs/performance.md#statements-built-once).
_LIVE_KEY = select(ApiKey).where(
    ApiKey.key_hash == bindparam("key_hash"), ApiKey.revoked_at.is_(None)
)


def find_api_key(session: Session, secret: str) -> ApiKey | None:
    """The live (not revoked) key with this secret, or None."""
    return session.scalars(_LIVE_KEY, {"key_hash": hash_api_key(secret)}).one_or_none()


def keys_of_course(session: Session, course_id: str | None) -> list[ApiKey]:
    """A course's keys (None: the keys tied to no course), revoked ones too, oldest first."""
    condition = ApiKey.course_id.is_(None) if course_id is None else ApiKey.course_id == course_id
    return list(session.scalars(select(ApiKey).where(condition).order_by(ApiKey.created_at)))


def revoke_api_key(session: Session, api_key: ApiKey) -> None:
    """The key stops working at once; its row (and its submissions) stay."""
    if api_key.revoked_at is None:
        api_key.revoked_at = utc_now()
        session.flush()


_bearer = HTTPBearer(auto_error=False, description="An API key from `loopgrade keys create`.")


def require_api_key(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiKey:
    """The calling client's key; 401 with `WWW-Authenticate: Bearer` when missing or wrong."""
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing API key: send 'Authorization: Bearer <key>' "
            "(create one with 'loopgrade keys create NAME')",
            headers={"WWW-Authenticate": "Bearer"},
        )
    api_key = find_api_key(session, credentials.credentials)
    if api_key is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="invalid or revoked API key",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    return api_key


ApiKeyDep = Annotated[ApiKey, Depends(require_api_key)]
