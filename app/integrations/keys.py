"""The tool's signing keys: RSA pairs kept in the database, sealed, rotated, published as a
JWKS.

The newest key that is not retired signs. `rotate_tool_key` makes a new one and retires the
old, which stays in the JWKS for `KEY_RETENTION` (longer than anything it signed lives), so a
platform holding a client assertion or deep-linking response signed just before a rotation
can still verify it.

Private keys are stored sealed (Fernet: AES-128-CBC and HMAC-SHA256) under a key-encryption
key that is not in the database: `LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS` (comma-separated; the
first seals, every one unseals, so the KEK itself can be rotated), or else a key made on
first start in `<data_dir>/lti_key_encryption_key` (0600). A copy of the database alone
cannot sign as the tool. `prepare_tool_keys`, at start-up, seals keys stored in plain text
before this (migration 0008), re-seals keys under the first KEK, and refuses to start when a
key cannot be unsealed, rather than failing at the first launch.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from joserfc import jwt
from joserfc.jwk import RSAKey
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.integrations.models import LtiToolKey
from app.models import utc_now
from app.settings import Settings

SIGNING_ALGORITHM = "RS256"
RSA_KEY_BITS = 2048
# What the tool signs lives at most this long (client assertions, deep-linking responses).
SIGNED_TOKEN_LIFETIME = timedelta(minutes=5)
# A retired key stays published this long: far longer than any token it signed, and than the
# time platforms cache a tool's JWKS.
KEY_RETENTION = timedelta(hours=24)


KEK_FILE_NAME = "lti_key_encryption_key"
PLAIN_PEM_PREFIX = "-----BEGIN"


class ToolKeysUnreadable(Exception):
    """A key-encryption key is malformed, or a stored private key cannot be unsealed with the
    configured ones; the message says what the operator should set."""


def key_sealing(settings: Settings) -> MultiFernet:
    """The key-encryption keys: LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS, or the data dir's file
    (made on first use, 0600; O_EXCL: two processes starting at once agree on one)."""
    configured = [k.strip() for k in settings.lti_key_encryption_keys.split(",") if k.strip()]
    if not configured:
        path = settings.data_dir / KEK_FILE_NAME
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            configured = [path.read_text().strip()]
        else:
            configured = [Fernet.generate_key().decode()]
            with os.fdopen(fd, "w") as file:
                file.write(configured[0] + "\n")
    try:
        return MultiFernet([Fernet(key) for key in configured])
    except ValueError:
        raise ToolKeysUnreadable(
            "a key-encryption key in LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS (or in "
            f"{settings.data_dir / KEK_FILE_NAME}) is not a Fernet key (32 url-safe base64 "
            "bytes; make one with: python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())')"
        ) from None


def start_up_sealing(session: Session, settings: Settings) -> MultiFernet:
    """`key_sealing` at start-up, refusing a key-encryption key file that is missing while the
    database holds keys sealed under one: a new file would unseal none of them, and an operator
    restoring the right file would first have to find and remove the wrong one."""
    configured = settings.lti_key_encryption_keys.strip()
    path = settings.data_dir / KEK_FILE_NAME
    if not configured and not path.exists():
        sealed = session.scalar(
            select(LtiToolKey.kid).where(
                ~LtiToolKey.private_key_sealed.startswith(PLAIN_PEM_PREFIX)
            )
        )
        if sealed is not None:
            raise ToolKeysUnreadable(
                f"{path} is missing but the database holds the tool's LTI keys sealed under "
                "it: restore that file from your backup (or set "
                "LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS to its key); no new file was written"
            )
    return key_sealing(settings)


def _unreadable(kid: str) -> ToolKeysUnreadable:
    return ToolKeysUnreadable(
        f"the tool's LTI private key {kid} cannot be unsealed with the configured "
        "key-encryption keys: set LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS (or restore "
        f"<data_dir>/{KEK_FILE_NAME}) to the key it was sealed with, on every host alike"
    )


def private_key(key: LtiToolKey, sealing: MultiFernet) -> RSAKey:
    try:
        pem = sealing.decrypt(key.private_key_sealed.encode())
    except InvalidToken:
        raise _unreadable(key.kid) from None
    return RSAKey.import_key(pem)


def prepare_tool_keys(session: Session, sealing: MultiFernet) -> None:
    """At start-up: seal plain-text keys and re-seal every key under the first KEK (which
    checks that each unseals): after a KEK rotation, the old KEK can be dropped once every
    host has started with the new one first."""
    for key in session.scalars(select(LtiToolKey)):
        stored = key.private_key_sealed.encode()
        try:
            key.private_key_sealed = (
                sealing.encrypt(stored)
                if key.private_key_sealed.startswith(PLAIN_PEM_PREFIX)
                else sealing.rotate(stored)
            ).decode()
        except InvalidToken:
            raise _unreadable(key.kid) from None
    session.flush()


def _new_key(sealing: MultiFernet) -> LtiToolKey:
    kid = secrets.token_urlsafe(12)
    key = RSAKey.generate_key(RSA_KEY_BITS, private=True)
    sealed = sealing.encrypt(key.as_pem(private=True))
    return LtiToolKey(kid=kid, private_key_sealed=sealed.decode())


def _current_key(session: Session) -> LtiToolKey | None:
    return session.scalars(
        select(LtiToolKey)
        .where(LtiToolKey.retired_at.is_(None))
        .order_by(LtiToolKey.created_at.desc())
    ).first()


def signing_key(session: Session, sealing: MultiFernet) -> LtiToolKey:
    """The key that signs now; the first one is made on first use.

    That first key is committed in a transaction of its own, at once: a platform fetches the
    JWKS to check what it signs while the caller's transaction is still open.
    """
    key = _current_key(session)
    if key is None:
        with Session(session.get_bind()) as own, own.begin():
            if _current_key(own) is None:
                own.add(_new_key(sealing))
        key = _current_key(session)
        assert key is not None
    return key


def rotate_tool_key(session: Session, sealing: MultiFernet) -> LtiToolKey:
    """A new signing key; the ones before it are retired (still published for a while)."""
    now = utc_now()
    for old in session.scalars(select(LtiToolKey).where(LtiToolKey.retired_at.is_(None))):
        old.retired_at = now
    key = _new_key(sealing)
    # Strictly newer than the retired ones even on a coarse clock.
    key.created_at = now
    session.add(key)
    session.flush()
    return key


def published_keys(session: Session, sealing: MultiFernet) -> list[LtiToolKey]:
    """The signing key and the retired keys still within their retention, newest first."""
    signing_key(session, sealing)
    cutoff = utc_now() - KEY_RETENTION
    return list(
        session.scalars(
            select(LtiToolKey)
            .where(or_(LtiToolKey.retired_at.is_(None), LtiToolKey.retired_at > cutoff))
            .order_by(LtiToolKey.created_at.desc())
        )
    )


def public_jwk(key: LtiToolKey, sealing: MultiFernet) -> dict[str, Any]:
    public: dict[str, Any] = dict(private_key(key, sealing).as_dict(private=False))
    public.update({"kid": key.kid, "use": "sig", "alg": SIGNING_ALGORITHM})
    return public


def tool_jwks(session: Session, sealing: MultiFernet) -> dict[str, list[dict[str, Any]]]:
    """The tool's JWKS document (`GET /lti/jwks`)."""
    return {"keys": [public_jwk(key, sealing) for key in published_keys(session, sealing)]}


def sign_jwt(session: Session, sealing: MultiFernet, claims: dict[str, Any]) -> str:
    """`claims` signed RS256 by the signing key, with its `kid` in the header."""
    key = signing_key(session, sealing)
    header = {"alg": SIGNING_ALGORITHM, "kid": key.kid, "typ": "JWT"}
    return jwt.encode(header, claims, private_key(key, sealing))
