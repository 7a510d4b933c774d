"""Grade passback (LTI Assignment and Grade Services) and roster sync (NRPS).

A graded submission in a course reached through LTI writes one outbox message: the learner's
counted score under the course's policy, with the time it was decided. The outbox delivers
it with `deliver_score`: an access token from the platform (client credentials with a signed
client assertion, cached until shortly before it expires), then the score POSTed to the line
item. The timestamp is the original one on every retry: Moodle answers 409 to a timestamp
not newer than the score it holds, which after a lost answer means "already applied".
"""

from __future__ import annotations

import enum
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import httpx
from cryptography.fernet import MultiFernet
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.courses.courses import assignment_of
from app.courses.gradebook import learner_cells
from app.db import SessionFactory
from app.lti.keys import SIGNED_TOKEN_LIFETIME, key_sealing, sign_jwt
from app.lti.models import LtiContext, LtiPlatform, LtiResourceLink, LtiUser
from app.models import Enrolment, Submission, utc_now
from app.outbox import DeliveryDeferred, PermanentFailure, add_to_outbox
from app.settings import Settings

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
LTI_SCORE_KIND = "lti-score"
LTI_ROSTER_KIND = "lti-roster"


class PlatformRefused(Exception):
    """The platform answered in a way that will not change by retrying (a 4xx)."""


class PlatformUnavailable(Exception):
    """The platform could not be reached or answered a transient error; retry later."""


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
    # app.lti.webhooks imports this module (for its errors): its check is imported here.
    from app.lti.webhooks import pinned_request

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


class DeliveryOutcome(enum.StrEnum):
    DELIVERED = "delivered"
    # Moodle's 409: the platform holds a score at least as new: this one was applied before.
    ALREADY_APPLIED = "already-applied"


def score_message(session: Session, submission: Submission) -> dict[str, Any] | None:
    """The outbox payload for a graded submission's counted score, or None when the learner
    and exercise are not reached through an LTI link with a line item, or one the tool may
    make (the course's line items service and the lineitem scope)."""
    if submission.course_id is None or submission.user_id is None:
        return None
    row = session.execute(
        select(LtiResourceLink, LtiUser)
        .join(LtiContext, LtiContext.id == LtiResourceLink.lti_context_id)
        .join(LtiUser, LtiUser.platform_id == LtiResourceLink.platform_id)
        .where(
            LtiContext.course_id == submission.course_id,
            LtiResourceLink.exercise_id == submission.exercise_id,
            or_(LtiResourceLink.lineitem_url.is_not(None), LtiContext.lineitems_url.is_not(None)),
            LtiUser.user_id == submission.user_id,
        )
        .order_by(LtiResourceLink.lineitem_url.is_(None), LtiResourceLink.created_at)
    ).first()
    if row is None:
        return None
    link, lti_user = row
    if link.ags_scopes is not None and SCORE_SCOPE not in link.ags_scopes:
        return None
    if link.lineitem_url is None and LINEITEM_SCOPE not in (link.ags_scopes or []):
        return None
    assigned = assignment_of(session, submission.course_id, submission.exercise_id)
    (cell,) = learner_cells(
        session, [assigned], course_id=submission.course_id, user_id=submission.user_id
    )
    if cell.score is None:
        return None
    return {
        "platform_id": link.platform_id,
        # None: made by the first delivery (ensure_line_item).
        "lineitem_url": link.lineitem_url,
        "resource_link": link.id,
        "user_sub": lti_user.subject,
        "score_given": cell.score,
        "score_maximum": cell.max_score,
        # Decided now; kept through every retry (Moodle orders scores by it).
        "timestamp": utc_now().isoformat(),
        "submission_id": submission.id,
        "course_id": submission.course_id,
        "exercise_id": submission.exercise_id,
    }


def deliver_score(
    session: Session, sealing: MultiFernet, tokens: AccessTokens, payload: dict[str, Any]
) -> DeliveryOutcome:
    """POST one score. Raises PlatformUnavailable (retry), PlatformRefused (give up) or
    LineItemBeingMade (wait: another delivery is making the link's line item). Writes only in
    transactions of its own (a line item it makes is kept on the link at once), so the
    caller's session may be one that only reads."""
    platform = session.get(LtiPlatform, payload["platform_id"])
    if platform is None:
        raise PlatformRefused("the platform is no longer registered")
    # The timestamp must parse, with its zone: a payload is checked before it is sent.
    datetime.fromisoformat(payload["timestamp"])
    body = {
        "userId": payload["user_sub"],
        "scoreGiven": payload["score_given"],
        "scoreMaximum": payload["score_maximum"],
        "timestamp": payload["timestamp"],
        "activityProgress": "Completed",
        # Canvas and Moodle record a score only when it is FullyGraded.
        "gradingProgress": "FullyGraded",
    }
    lineitem_url = payload["lineitem_url"]
    if lineitem_url is None:
        # A link that came without a line item: one is made (or found) for it, once.
        from app.lti.line_items import ensure_line_item

        link = session.get(LtiResourceLink, payload["resource_link"])
        if link is None:
            raise PlatformRefused("the LMS link is no longer known here")
        lineitem_url = ensure_line_item(session, sealing, tokens, link)
    url = service_url(lineitem_url, "scores")
    reply = call_platform(
        session, sealing, tokens, platform, "POST", url,
        scope=SCORE_SCOPE, headers={"Content-Type": SCORE_MEDIA_TYPE}, json_body=body,
    )  # fmt: skip
    if reply.status_code == 409:
        return DeliveryOutcome.ALREADY_APPLIED
    raise_for_reply(reply, f"POST {url}")
    return DeliveryOutcome.DELIVERED


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


class RosterSync(NamedTuple):
    added: int
    updated: int


def sync_roster(
    session: Session, sealing: MultiFernet, tokens: AccessTokens, context: LtiContext
) -> RosterSync:
    """Enrol every member the platform lists (NRPS), with their role; follows rel="next"."""
    from app.lti.provisioning import course_role_of, enrol, lti_account

    if context.memberships_url is None:
        raise PlatformRefused("the platform offers no roster (Names and Role service) here")
    platform = session.get(LtiPlatform, context.platform_id)
    assert platform is not None
    added = updated = 0
    members = fetch_all_pages(
        session,
        sealing,
        tokens,
        platform,
        context.memberships_url,
        scope=NRPS_SCOPE,
        accept=MEMBERSHIP_MEDIA_TYPE,
        # The membership container is an object whose members are the entries.
        entries_of=lambda page: page["members"],
    )
    for member in members:
        if not isinstance(member, dict) or not isinstance(member.get("user_id"), str):
            continue
        if member.get("status", "Active") != "Active":
            continue
        roles = member.get("roles")
        role = course_role_of(
            [r for r in roles if isinstance(r, str)] if isinstance(roles, list) else []
        )
        user = lti_account(session, platform, member["user_id"][:255], member)
        already = session.scalars(
            select(Enrolment.id).where(
                Enrolment.course_id == context.course_id, Enrolment.user_id == user.id
            )
        ).first()
        enrol(session, user, context.course_id, role)
        if already is None:
            added += 1
        else:
            updated += 1
    context.roster_synced_at = utc_now()
    session.flush()
    return RosterSync(added, updated)


# The access tokens of this process's deliveries (a cache: each process asks for its own).
ACCESS_TOKENS = AccessTokens()


def deliver_lti_score(
    sessions: SessionFactory, settings: Settings, payload: dict[str, Any]
) -> None:
    """The outbox's delivery of a score: a refusal for good is recorded, not retried."""
    with sessions() as session:
        # Reads only, each committed at once (DBAPI autocommit): no transaction, let alone a
        # write lock, stays open while the platform answers. What it writes (the link's claim
        # and line item) goes in transactions of its own.
        session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        try:
            outcome = deliver_score(session, key_sealing(settings), ACCESS_TOKENS, payload)
        except PlatformRefused as exc:
            raise PermanentFailure(str(exc)) from None
        except LineItemBeingMade as exc:
            # Look again soon, and at the latest when the claim lapses (its holder died).
            lapses_in_seconds = (exc.claimed_until - utc_now()).total_seconds()
            raise DeliveryDeferred(
                str(exc),
                retry_after_seconds=max(
                    0.0, min(lapses_in_seconds, settings.outbox_retry_base_seconds)
                ),
            ) from None
    log.info(
        "submission %s: score %s/%s for the LMS: %s",
        payload.get("submission_id"),
        payload.get("score_given"),
        payload.get("score_maximum"),
        outcome,
    )


def send_score_to_lms(session: Session, submission: Submission) -> None:
    """A graded submission reached through LTI: its counted score goes to the LMS."""
    message = score_message(session, submission)
    if message is not None:
        add_to_outbox(session, LTI_SCORE_KIND, message)


def deliver_roster_sync(
    sessions: SessionFactory, settings: Settings, payload: dict[str, Any]
) -> None:
    """Enrol a context's roster (asked for on its first launch, or by an instructor)."""
    with sessions.begin() as session:
        context = session.get(LtiContext, payload["lti_context_id"])
        if context is None:
            raise PermanentFailure("the LMS course is no longer known here")
        try:
            synced = sync_roster(session, key_sealing(settings), ACCESS_TOKENS, context)
        except PlatformRefused as exc:
            raise PermanentFailure(str(exc)) from None
    log.info("roster of LMS course %s: %d added, %d updated", context.context_id, *synced)


def request_roster_sync(session: Session, context: LtiContext) -> None:
    add_to_outbox(
        session,
        LTI_ROSTER_KIND,
        {"lti_context_id": context.id, "course_id": context.course_id},
    )
