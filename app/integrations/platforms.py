"""Registered platforms (LMSs) and their public keys.

An operator registers a platform with `loopgrade lti platforms add`; a platform's keys come
from its JWKS URL, cached per process and fetched again once when a token names a key the
cache does not hold (platforms such as Brightspace rotate often).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.integrations.models import LtiDeployment, LtiPlatform

MAX_JWKS_BYTES = 256 * 1024
HTTP_TIMEOUT_SECONDS = 10.0
# A fetched JWKS is used this long before it is fetched again regardless of kids.
JWKS_MAX_AGE_SECONDS = 3600.0


class PlatformError(ValueError):
    """A platform registration that cannot be made; the message says what to change."""


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address: this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(name: str, url: str) -> str:
    """An absolute https URL (http only on this machine's loopback, for testing)."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise PlatformError(f"{name} must be an absolute https:// URL, not {url!r}")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise PlatformError(f"{name} must use https:// ({url!r} is plain http on another machine)")
    if len(url) > 1000:
        raise PlatformError(f"{name} is over 1000 characters")
    return url


def add_platform(
    session: Session,
    *,
    issuer: str,
    client_id: str,
    deployment_ids: list[str],
    auth_url: str,
    token_url: str,
    jwks_url: str,
) -> LtiPlatform:
    """Register a platform, or add deployments and new URLs to one with this issuer and client."""
    # Kept exactly as given: a token's `iss` must equal it, character for character.
    issuer, client_id = issuer.strip(), client_id.strip()
    if not issuer or not client_id:
        raise PlatformError("--issuer and --client-id must not be empty")
    if not deployment_ids or any(not d.strip() for d in deployment_ids):
        raise PlatformError("give at least one --deployment-id, none of them empty")
    urls = {
        "auth_url": check_url("--auth-url", auth_url),
        "token_url": check_url("--token-url", token_url),
        "jwks_url": check_url("--jwks-url", jwks_url),
    }
    platform = find_platform(session, issuer, client_id)
    if platform is None:
        platform = LtiPlatform(issuer=issuer, client_id=client_id, **urls)
        session.add(platform)
        session.flush()
    else:
        for field, value in urls.items():
            setattr(platform, field, value)
    known = set(deployments_of(session, platform))
    for deployment_id in deployment_ids:
        if deployment_id.strip() not in known:
            session.add(LtiDeployment(platform_id=platform.id, deployment_id=deployment_id.strip()))
            known.add(deployment_id.strip())
    session.flush()
    return platform


def find_platform(session: Session, issuer: str, client_id: str | None) -> LtiPlatform | None:
    """The platform with this issuer (and client id; any one of the issuer's when None and
    there is exactly one)."""
    query = select(LtiPlatform).where(LtiPlatform.issuer == issuer)
    if client_id is not None:
        return session.scalars(query.where(LtiPlatform.client_id == client_id)).one_or_none()
    candidates = session.scalars(query).all()
    return candidates[0] if len(candidates) == 1 else None


def deployments_of(session: Session, platform: LtiPlatform) -> list[str]:
    return list(
        session.scalars(
            select(LtiDeployment.deployment_id)
            .where(LtiDeployment.platform_id == platform.id)
            .order_by(LtiDeployment.deployment_id)
        )
    )


def list_platforms(session: Session) -> list[LtiPlatform]:
    return list(session.scalars(select(LtiPlatform).order_by(LtiPlatform.created_at)))


class PlatformKeysUnavailable(Exception):
    """The platform's JWKS could not be fetched or read; the message says why."""


@dataclass
class _CachedKeySet:
    keys: KeySet
    kids: frozenset[str]
    fetched_at_monotonic: float


class PlatformKeyCache:
    """Each platform's JWKS, fetched on demand and once more on a kid it does not hold.

    `refetch_interval_seconds` bounds how often a stream of tokens with made-up kids can make
    this process fetch a platform's JWKS.
    """

    def __init__(self, *, refetch_interval_seconds: float) -> None:
        self._refetch_interval_seconds = refetch_interval_seconds
        self._cached: dict[str, _CachedKeySet] = {}
        self._lock = threading.Lock()

    def key_set_with(self, jwks_url: str, kid: str) -> KeySet | None:
        """The JWKS at `jwks_url` if it holds `kid` (fetching it again once if the cached one
        does not); None when even a fresh copy does not hold it."""
        with self._lock:
            cached = self._cached.get(jwks_url)
        now = time.monotonic()
        if cached is not None and now - cached.fetched_at_monotonic < JWKS_MAX_AGE_SECONDS:
            if kid in cached.kids:
                return cached.keys
            if now - cached.fetched_at_monotonic < self._refetch_interval_seconds:
                return None
        fresh = _fetch_jwks(jwks_url)
        with self._lock:
            self._cached[jwks_url] = fresh
        return fresh.keys if kid in fresh.kids else None


def _fetch_jwks(jwks_url: str) -> _CachedKeySet:
    try:
        with httpx.stream(
            "GET",
            jwks_url,
            headers={"Accept": "application/json"},
            timeout=HTTP_TIMEOUT_SECONDS,
            follow_redirects=False,
        ) as reply:
            body = b""
            for chunk in reply.iter_bytes():
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise PlatformKeysUnavailable(
                        f"the JWKS at {jwks_url} is over {MAX_JWKS_BYTES} bytes"
                    )
            status = reply.status_code
    except httpx.HTTPError as exc:
        raise PlatformKeysUnavailable(f"fetching {jwks_url} failed: {exc}") from None
    if status != 200:
        raise PlatformKeysUnavailable(f"{jwks_url} answered HTTP {status}")
    try:
        document: Any = httpx.Response(200, content=body).json()
        keys = [k for k in document["keys"] if isinstance(k, dict) and k.get("kty") == "RSA"]
        key_set = KeySet.import_key_set({"keys": keys})
    except (ValueError, KeyError, TypeError, JoseError) as exc:
        raise PlatformKeysUnavailable(
            f"{jwks_url} did not answer a JWKS with RSA keys ({type(exc).__name__})"
        ) from None
    kids = frozenset(str(k["kid"]) for k in keys if "kid" in k)
    return _CachedKeySet(key_set, kids, time.monotonic())
