"""Calling an LTI platform's services (AGS, NRPS): access tokens, the checked service URL, a
call, its paged lists, and what an answer means (retry, or refused).

Scores (app/integrations/ags.py) and line items (app/integrations/line_items.py) both sit on
this module.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from cryptography.fernet import MultiFernet
from sqlalchemy.orm import Session

from app.integrations.delivery_errors import PlatformRefused, PlatformUnavailable
from app.integrations.keys import SIGNED_TOKEN_LIFETIME, sign_jwt
from app.integrations.models import LtiPlatform
from app.integrations.webhooks import pinned_request

log = logging.getLogger(__name__)

AGS_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/"
SCORE_SCOPE = AGS_SCOPE + "score"
LINEITEM_SCOPE = AGS_SCOPE + "lineitem"
NRPS_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
SCORE_MEDIA_TYPE = "application/vnd.ims.lis.v1.score+json"
MEMBERSHIP_MEDIA_TYPE = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
HTTP_TIMEOUT_SECONDS = 15.0
# A token is used until this long before the platform said it expires.
TOKEN_EXPIRY_MARGIN_SECONDS = 60
MAX_ERROR_CHARS = 500
# Pages of one list followed at most (roster, line items, results).
MAX_PAGES = 50


class LineItemBeingMade(Exception):
    """Another delivery holds the claim to make this link's line item, until `claimed_until`:
    a score for the link waits for it rather than make a second column."""

    def __init__(self, claimed_until: datetime) -> None:
        super().__init__(f"another delivery is making the link's LMS column, until {claimed_until}")
        self.claimed_until = claimed_until


@dataclass
class _CachedToken:
    access_token: str
    expires_at_monotonic: float


class AccessTokens:
    """Access tokens per (platform, scopes), shared by this process's deliveries."""

    def __init__(self) -> None:
        self._tokens: dict[tuple[str, str], _CachedToken] = {}
        self._lock = threading.Lock()

    def get(
        self, session: Session, sealing: MultiFernet, platform: LtiPlatform, scopes: list[str]
    ) -> str:
        key = (platform.id, " ".join(sorted(scopes)))
        with self._lock:
            cached = self._tokens.get(key)
        if cached is not None and time.monotonic() < cached.expires_at_monotonic:
            return cached.access_token
        fresh = request_access_token(session, sealing, platform, scopes)
        with self._lock:
            self._tokens[key] = fresh
        return fresh.access_token

    def forget(self, platform: LtiPlatform) -> None:
        with self._lock:
            for key in [k for k in self._tokens if k[0] == platform.id]:
                del self._tokens[key]


def _problem(reply: httpx.Response) -> str:
    return f"HTTP {reply.status_code}: {reply.text[:MAX_ERROR_CHARS]}"


def raise_for_reply(reply: httpx.Response, what: str) -> None:
    """PlatformUnavailable for an answer worth retrying, PlatformRefused for another error."""
    if reply.status_code < 300:
        return
    if reply.status_code in (408, 425, 429) or reply.status_code >= 500:
        raise PlatformUnavailable(f"{what}: {_problem(reply)}")
    raise PlatformRefused(f"{what}: {_problem(reply)}")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def registered_origins(platform: LtiPlatform) -> set[str]:
    """The origins an operator registered for the platform: its issuer and its URLs."""
    urls = (platform.issuer, platform.auth_url, platform.token_url, platform.jwks_url)
    return {_origin(url) for url in urls}


def service_request(platform: LtiPlatform, url: str) -> tuple[str, dict[str, Any]]:
    """Where a call to the platform's service `url` connects, and the request options that
    keep its host name.

    Service URLs come from the platform's launches, and the call carries its access token: a
    hostile platform could aim it at this server's own network. A URL on an origin the
    operator registered for the platform is used as it is (an LMS on the campus network, the
    tests' fake one on loopback); any other must be https to a host that resolves to public
    addresses only, and the connection goes to the address checked (the webhooks' check).
    """
    if _origin(url) in registered_origins(platform):
        return url, {}
    if urlsplit(url).scheme != "https":
        raise PlatformRefused(f"{url}: a platform's service URL must use https://")
    try:
        return pinned_request(url, allow_private_addresses=False)
    except PlatformRefused as exc:
        raise PlatformRefused(
            f"{url}: not an origin registered for the platform, and {exc}"
        ) from None


def call_platform(
    session: Session,
    sealing: MultiFernet,
    tokens: AccessTokens,
    platform: LtiPlatform,
    method: str,
    url: str,
    *,
    scope: str,
    headers: dict[str, str],
    json_body: dict[str, Any] | None = None,
) -> httpx.Response:
    """One request to a platform's service with an access token for `scope`, sent only where
    `service_request` allows; a token the platform dropped before its time (HTTP 401) is
    replaced once. Raises PlatformUnavailable when the platform cannot be reached or refuses
    the fresh token too; any other answer is the caller's to read."""
    what = f"{method} {url}"
    target, pinning = service_request(platform, url)
    for attempt in range(2):
        token = tokens.get(session, sealing, platform, [scope])
        try:
            with httpx.Client(timeout=HTTP_TIMEOUT_SECONDS, follow_redirects=False) as client:
                reply = client.request(
                    method,
                    target,
                    json=json_body,
                    headers={
                        **headers,
                        **pinning.get("headers", {}),
                        "Authorization": f"Bearer {token}",
                    },
                    extensions=pinning.get("extensions"),
                )
        except httpx.HTTPError as exc:
            raise PlatformUnavailable(f"{what}: {exc}") from None
        if reply.status_code != 401 or attempt == 1:
            break
        tokens.forget(platform)
    if reply.status_code == 401:
        raise PlatformUnavailable(f"{what}: refused a fresh token (HTTP 401)")
    return reply


def client_assertion(session: Session, sealing: MultiFernet, platform: LtiPlatform) -> str:
    """The RS256 JWT that authenticates this tool at the platform's token URL."""
    now = int(time.time())
    return sign_jwt(
        session,
        sealing,
        {
            "iss": platform.client_id,
            "sub": platform.client_id,
            "aud": platform.token_url,
            "iat": now,
            "exp": now + int(SIGNED_TOKEN_LIFETIME.total_seconds()),
            "jti": secrets.token_urlsafe(16),
        },
    )


def request_access_token(
    session: Session, sealing: MultiFernet, platform: LtiPlatform, scopes: list[str]
) -> _CachedToken:
    form = {
        "grant_type": "client_credentials",
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        "client_assertion": client_assertion(session, sealing, platform),
        "scope": " ".join(scopes),
    }
    try:
        reply = httpx.post(platform.token_url, data=form, timeout=HTTP_TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        raise PlatformUnavailable(f"token request to {platform.token_url}: {exc}") from None
    raise_for_reply(reply, f"token request to {platform.token_url}")
    try:
        body = reply.json()
        access_token = body["access_token"]
        expires_in = float(body.get("expires_in", 3600))
    except (ValueError, KeyError, TypeError):
        raise PlatformRefused(
            f"the token URL {platform.token_url} answered no access_token"
        ) from None
    if not isinstance(access_token, str) or not access_token:
        raise PlatformRefused(f"the token URL {platform.token_url} answered no access_token")
    lifetime = max(0.0, min(expires_in, 24 * 3600) - TOKEN_EXPIRY_MARGIN_SECONDS)
    return _CachedToken(access_token, time.monotonic() + lifetime)


def service_url(lineitem_url: str, service: str) -> str:
    """`<line item>/scores` or `/results`, inserted before any query string."""
    parts = urlsplit(lineitem_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + service))


def fetch_all_pages(
    session: Session,
    sealing: MultiFernet,
    tokens: AccessTokens,
    platform: LtiPlatform,
    url: str,
    *,
    scope: str,
    accept: str,
    params: dict[str, str] | None = None,
    entries_of: Callable[[Any], Any] = lambda page: page,
) -> list[Any]:
    """Every entry of a paged list of the platform's (AGS line items and results: a JSON
    array per page; NRPS: `entries_of` picks them), following `Link: rel="next"`."""
    entries: list[Any] = []
    next_url: str | None = str(httpx.URL(url).copy_merge_params(params or {}))
    for _ in range(MAX_PAGES):
        if next_url is None:
            break
        reply = call_platform(
            session, sealing, tokens, platform, "GET", next_url,
            scope=scope, headers={"Accept": accept},
        )  # fmt: skip
        raise_for_reply(reply, f"GET {next_url}")
        try:
            page = entries_of(reply.json())
        except (ValueError, KeyError, TypeError):
            raise PlatformRefused(f"GET {next_url} answered no {accept}") from None
        if not isinstance(page, list):
            raise PlatformRefused(f"GET {next_url} answered no list ({accept})")
        entries.extend(page)
        link = reply.links.get("next", {}).get("url")
        next_url = link if isinstance(link, str) and link != next_url else None
    return entries
