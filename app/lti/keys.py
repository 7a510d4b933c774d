"""The tool's signing keys: RSA pairs kept in the database, rotated, published as a JWKS.

The newest key that is not retired signs. `rotate_tool_key` makes a new one and retires the
old, which stays in the JWKS for `KEY_RETENTION` (longer than anything it signed lives), so a
platform holding a client assertion or deep-linking response signed just before a rotation
can still verify it.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from joserfc import jwt
from joserfc.jwk import RSAKey
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.lti.models import LtiToolKey
from app.models import utc_now

SIGNING_ALGORITHM = "RS256"
RSA_KEY_BITS = 2048
# What the tool signs lives at most this long (client assertions, deep-linking responses).
SIGNED_TOKEN_LIFETIME = timedelta(minutes=5)
# A retired key stays published this long: far longer than any token it signed, and than the
# time platforms cache a tool's JWKS.
KEY_RETENTION = timedelta(hours=24)


def _new_key() -> LtiToolKey:
    kid = secrets.token_urlsafe(12)
    key = RSAKey.generate_key(RSA_KEY_BITS, private=True)
    return LtiToolKey(kid=kid, private_key_pem=key.as_pem(private=True).decode())


def _current_key(session: Session) -> LtiToolKey | None:
    return session.scalars(
        select(LtiToolKey)
        .where(LtiToolKey.retired_at.is_(None))
        .order_by(LtiToolKey.created_at.desc())
    ).first()


def signing_key(session: Session) -> LtiToolKey:
    """The key that signs now; the first one is made on first use.

    That first key is committed in a transaction of its own, at once: a platform fetches the
    JWKS to check what it signs while the caller's transaction is still open.
    """
    key = _current_key(session)
    if key is None:
        with Session(session.get_bind()) as own, own.begin():
            if _current_key(own) is None:
                own.add(_new_key())
        key = _current_key(session)
        assert key is not None
    return key


def rotate_tool_key(session: Session) -> LtiToolKey:
    """A new signing key; the ones before it are retired (still published for a while)."""
    now = utc_now()
    for old in session.scalars(select(LtiToolKey).where(LtiToolKey.retired_at.is_(None))):
        old.retired_at = now
    key = _new_key()
    # Strictly newer than the retired ones even on a coarse clock.
    key.created_at = now
    session.add(key)
    session.flush()
    return key


def published_keys(session: Session) -> list[LtiToolKey]:
    """The signing key and the retired keys still within their retention, newest first."""
    signing_key(session)
    cutoff = utc_now() - KEY_RETENTION
    return list(
        session.scalars(
            select(LtiToolKey)
            .where(or_(LtiToolKey.retired_at.is_(None), LtiToolKey.retired_at > cutoff))
            .order_by(LtiToolKey.created_at.desc())
        )
    )


def public_jwk(key: LtiToolKey) -> dict[str, Any]:
    imported = RSAKey.import_key(key.private_key_pem)
    public: dict[str, Any] = dict(imported.as_dict(private=False))
    public.update({"kid": key.kid, "use": "sig", "alg": SIGNING_ALGORITHM})
    return public


def tool_jwks(session: Session) -> dict[str, list[dict[str, Any]]]:
    """The tool's JWKS document (`GET /lti/jwks`)."""
    return {"keys": [public_jwk(key) for key in published_keys(session)]}


def sign_jwt(session: Session, claims: dict[str, Any]) -> str:
    """`claims` signed RS256 by the signing key, with its `kid` in the header."""
    key = signing_key(session)
    header = {"alg": SIGNING_ALGORITHM, "kid": key.kid, "typ": "JWT"}
    return jwt.encode(header, claims, RSAKey.import_key(key.private_key_pem))
