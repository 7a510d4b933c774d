"""LTI 1.3 login and launch: the OIDC third-party-initiated login, and the checks on the
platform's id_token before anything in it is believed.

One idea over 400 lines: the checks a launch passes before anything in it is believed.

Every refusal is a `LaunchRejected` naming the check that failed, what was wrong, and what the
operator (or the platform's administrator) should change. State and nonce live in the
database, not in a cookie: a cross-site iframe often keeps no cookie at all.
"""

from __future__ import annotations

import base64
import enum
import hmac
import json
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

from joserfc import jwt
from joserfc.errors import BadSignatureError, JoseError
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.errors import AppError
from app.integrations.models import LtiDeployment, LtiLoginState, LtiPlatform
from app.integrations.platforms import PlatformKeyCache, PlatformKeysUnavailable, find_platform
from app.models import utc_now
from app.rate_limits import RateLimit, seconds_until_allowed
from app.settings import Settings

LTI_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
DL_CLAIM = "https://purl.imsglobal.org/spec/lti-dl/claim/"
AGS_ENDPOINT_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
LTI_VERSION = "1.3.0"
MAX_ID_TOKEN_CHARS = 64 * 1024
MAX_CLAIM_CHARS = 255


class MessageType(enum.StrEnum):
    RESOURCE_LINK = "LtiResourceLinkRequest"
    DEEP_LINKING = "LtiDeepLinkingRequest"


class LaunchCheck(enum.StrEnum):
    """The checks of a login and a launch, in the order they are made."""

    LOGIN_REQUEST = "login request"
    STATE = "state"
    PLATFORM_STORAGE = "platform storage"
    TOKEN_FORMAT = "token format"
    SIGNING_KEY = "signing key (kid)"
    PLATFORM_KEYS = "platform keys (JWKS)"
    SIGNATURE = "signature"
    ISSUER = "issuer (iss)"
    AUDIENCE = "audience (aud, azp)"
    EXPIRY = "expiry (exp)"
    ISSUED_AT = "issued at (iat)"
    NONCE = "nonce"
    MESSAGE_TYPE = "message type"
    VERSION = "LTI version"
    REQUIRED_CLAIMS = "required claims"
    DEPLOYMENT = "deployment"


class LaunchRejected(Exception):
    """A login or launch refused by one check: what was wrong and how to fix it."""

    def __init__(self, check: LaunchCheck, problem: str, fix: str) -> None:
        super().__init__(f"{check}: {problem}")
        self.check = check
        self.problem = problem
        self.fix = fix


def _text(value: object, name: str, *, required: bool = True) -> str:
    if value is None or value == "":
        if required:
            raise LaunchRejected(
                LaunchCheck.LOGIN_REQUEST,
                f"the login request has no {name}",
                "The platform must send iss, login_hint and target_link_uri to the login URL; "
                "check that the tool's login URL is /lti/login.",
            )
        return ""
    if not isinstance(value, str) or len(value) > 2000 or "\0" in value:
        raise LaunchRejected(
            LaunchCheck.LOGIN_REQUEST,
            f"{name} is not a short text",
            "Check the tool's registration on the platform.",
        )
    return value


# A frame name, or "_parent" (LTI Platform Storage's lti_storage_target).
STORAGE_TARGET = re.compile(r"[A-Za-z0-9_.-]{1,100}")


@dataclass(frozen=True)
class BegunLogin:
    """A login recorded here: where to send the browser, and, when the platform offers LTI
    Platform Storage, what to put there first (through postMessage, in the LMS's page)."""

    auth_redirect: str
    storage_target: str | None
    storage_key: str
    storage_value: str | None
    platform_origin: str


def storage_key(state: str) -> str:
    return f"state_{state}"


class TooManyLogins(AppError):
    """As many LTI logins were started within a login's lifetime as `LoginLimits` allow:
    from this client address (429), or from all (503)."""

    title = "Too many LTI logins"

    def __init__(self, retry_after_seconds: int, *, from_everywhere: bool) -> None:
        where = "everywhere" if from_everywhere else "your network"
        super().__init__(
            f"Too many LMS launches were started from {where} in the last minutes. Wait a "
            "moment and open the link in the LMS again.",
            headers={"Retry-After": str(retry_after_seconds)},
        )
        self.status_code = 503 if from_everywhere else 429


@dataclass(frozen=True)
class LoginLimits:
    """Logins started within a login's lifetime: from one client address, and from all.

    Anyone who knows a registered issuer (it is public) may start one, and each is a row until
    it expires: so both are bounded, and expired ones are swept when a login starts."""

    state_max_age_seconds: int
    per_address: int
    in_total: int

    @classmethod
    def from_settings(cls, settings: Settings) -> LoginLimits:
        return cls(
            state_max_age_seconds=settings.lti_state_max_age_seconds,
            per_address=settings.lti_max_logins_per_address,
            in_total=settings.lti_max_logins,
        )


def _check_login_limits(session: Session, limits: LoginLimits, client_address: str) -> None:
    window = limits.state_max_age_seconds
    started_at = LtiLoginState.created_at
    retry_after = seconds_until_allowed(
        session,
        RateLimit(limits.per_address, window),
        started_at,
        LtiLoginState.client_address == client_address,
    )
    if retry_after is not None:
        raise TooManyLogins(retry_after, from_everywhere=False)
    retry_after = seconds_until_allowed(session, RateLimit(limits.in_total, window), started_at)
    if retry_after is not None:
        raise TooManyLogins(retry_after, from_everywhere=True)


def begin_login(
    session: Session,
    params: Mapping[str, str],
    *,
    redirect_uri: str,
    client_address: str,
    limits: LoginLimits,
) -> BegunLogin:
    """Record a new state and nonce, and the platform's auth URL to send the browser to.
    Raises LaunchRejected for a bad request, TooManyLogins past `limits`."""
    issuer = _text(params.get("iss"), "iss")
    login_hint = _text(params.get("login_hint"), "login_hint")
    target_link_uri = _text(params.get("target_link_uri"), "target_link_uri")
    client_id = _text(params.get("client_id"), "client_id", required=False) or None
    message_hint = _text(params.get("lti_message_hint"), "lti_message_hint", required=False)
    storage_target = (
        _text(params.get("lti_storage_target"), "lti_storage_target", required=False) or None
    )
    if storage_target is not None and not STORAGE_TARGET.fullmatch(storage_target):
        raise LaunchRejected(
            LaunchCheck.LOGIN_REQUEST,
            "lti_storage_target is not a frame name",
            "The platform's lti_storage_target must be _parent or the name of its storage frame.",
        )
    platform = find_platform(session, issuer, client_id)
    if platform is None:
        raise LaunchRejected(
            LaunchCheck.LOGIN_REQUEST,
            f"no platform is registered with issuer {issuer!r}"
            + (f" and client id {client_id!r}" if client_id else ""),
            "Register it: loopgrade lti platforms add --issuer ISSUER --client-id ID "
            "--deployment-id ID --auth-url URL --token-url URL --jwks-url URL "
            "(the admin page /lti/admin lists what is registered).",
        )
    now = utc_now()
    # Logins that expired (never finished, or used) are only clutter.
    session.execute(delete(LtiLoginState).where(LtiLoginState.expires_at < now))
    client_address = client_address[:64]
    _check_login_limits(session, limits, client_address)
    state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    storage_value = secrets.token_urlsafe(32) if storage_target else None
    session.add(
        LtiLoginState(
            state=state,
            nonce=nonce,
            platform_id=platform.id,
            target_link_uri=target_link_uri[:1000],
            client_address=client_address,
            created_at=now,
            expires_at=now + timedelta(seconds=limits.state_max_age_seconds),
            storage_target=storage_target,
            storage_value=storage_value,
        )
    )
    session.flush()
    query = {
        "scope": "openid",
        "response_type": "id_token",
        "response_mode": "form_post",
        "prompt": "none",
        "client_id": platform.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "nonce": nonce,
        "login_hint": login_hint,
    }
    if message_hint:
        query["lti_message_hint"] = message_hint
    separator = "&" if "?" in platform.auth_url else "?"
    auth = urlsplit(platform.auth_url)
    return BegunLogin(
        auth_redirect=f"{platform.auth_url}{separator}{urlencode(query)}",
        storage_target=storage_target,
        storage_key=storage_key(state),
        storage_value=storage_value,
        platform_origin=f"{auth.scheme}://{auth.netloc}",
    )


def login_awaiting_storage(session: Session, state: str) -> LtiLoginState | None:
    """The unused login of `state` when it put its state in the platform's storage: the
    launch must read it back from there before it is checked."""
    row = session.get(LtiLoginState, state) if state and len(state) <= 64 else None
    if row is None or row.storage_target is None or row.used_at is not None:
        return None
    return row


def _check_platform_storage(
    row: LtiLoginState, storage_value: str | None, *, same_origin: bool
) -> None:
    """The value read back from the platform's storage, posted by this tool's own page: the
    launch comes from the browser (and LMS page) that started the login."""
    if row.storage_target is None or row.storage_value is None:
        return
    if storage_value is None or not same_origin:
        raise LaunchRejected(
            LaunchCheck.PLATFORM_STORAGE,
            "the launch did not come back through this tool's platform storage page",
            "Open the link in the platform again; if it keeps happening, the launch was "
            "posted from another site (a forged launch).",
        )
    if not hmac.compare_digest(storage_value.encode(), row.storage_value.encode()):
        raise LaunchRejected(
            LaunchCheck.PLATFORM_STORAGE,
            "the LMS page does not hold this login's state (this browser did not start it, "
            "or the LMS lost it)",
            "Open the link in the platform again, in the same browser window.",
        )


@dataclass(frozen=True)
class ValidatedLaunch:
    """An id_token that passed every check, with its platform."""

    platform: LtiPlatform
    claims: dict[str, Any]
    message_type: MessageType
    deployment_id: str

    def claim(self, name: str) -> Any:
        return self.claims.get(LTI_CLAIM + name)


def _consume_state(session: Session, state: str) -> LtiLoginState:
    if not state or len(state) > 64:
        raise LaunchRejected(
            LaunchCheck.STATE,
            "the launch carries no state",
            "The platform must post back the state the tool sent; start the launch again "
            "from the platform.",
        )
    row = session.get(LtiLoginState, state)
    if row is None or row.expires_at < utc_now():
        raise LaunchRejected(
            LaunchCheck.STATE,
            "the state is unknown or expired (the login was not started here, or too long ago)",
            "Open the link in the platform again. If it keeps happening, check that the "
            "platform's login URL is this tool's /lti/login.",
        )
    consumed = session.execute(
        update(LtiLoginState)
        .where(LtiLoginState.state == state, LtiLoginState.used_at.is_(None))
        .values(used_at=utc_now())
        .returning(LtiLoginState.state)
        .execution_options(synchronize_session=False)
    ).one_or_none()
    if consumed is None:
        raise LaunchRejected(
            LaunchCheck.STATE,
            "this state was already used by an earlier launch (a replayed launch)",
            "Open the link in the platform again: every launch needs a new login.",
        )
    return row


def _header(id_token: str) -> dict[str, Any]:
    try:
        encoded = id_token.split(".")[0]
        header = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (ValueError, IndexError):
        header = None
    if not isinstance(header, dict) or id_token.count(".") != 2:
        raise LaunchRejected(
            LaunchCheck.TOKEN_FORMAT,
            "id_token is not a signed JWT (three base64url parts)",
            "The platform must post a signed id_token; check its LTI 1.3 configuration.",
        )
    return header


def _fix_keys(platform: LtiPlatform) -> str:
    return (
        f"Check the platform's JWKS URL registered here ({platform.jwks_url}) against the "
        "platform's 'public keyset URL'; correct it with loopgrade lti platforms add."
    )


def _verified_claims(
    id_token: str, platform: LtiPlatform, key_cache: PlatformKeyCache
) -> dict[str, Any]:
    header = _header(id_token)
    if header.get("alg") != "RS256":
        raise LaunchRejected(
            LaunchCheck.SIGNATURE,
            f"the id_token is signed with {header.get('alg')!r}, not RS256",
            "LTI 1.3 platforms sign with RS256; check the platform's key settings.",
        )
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise LaunchRejected(
            LaunchCheck.SIGNING_KEY,
            "the id_token's header names no key (kid)",
            "The platform must name its signing key in the token header.",
        )
    try:
        key_set = key_cache.key_set_with(platform.jwks_url, kid)
    except PlatformKeysUnavailable as exc:
        raise LaunchRejected(LaunchCheck.PLATFORM_KEYS, str(exc), _fix_keys(platform)) from None
    if key_set is None:
        raise LaunchRejected(
            LaunchCheck.SIGNING_KEY,
            f"the platform's JWKS holds no key {kid!r}, even fetched again just now",
            _fix_keys(platform),
        )
    try:
        token = jwt.decode(id_token, key_set, algorithms=["RS256"])
    except BadSignatureError:
        raise LaunchRejected(
            LaunchCheck.SIGNATURE,
            f"the signature does not verify with the platform's key {kid!r}",
            "The token was altered, or signed by another key than the JWKS publishes. "
            + _fix_keys(platform),
        ) from None
    except JoseError as exc:
        raise LaunchRejected(
            LaunchCheck.TOKEN_FORMAT,
            f"the id_token cannot be read: {exc.description or type(exc).__name__}",
            "The platform must post a signed JWT whose payload is a JSON object.",
        ) from None
    return dict(token.claims)


def _check_times(claims: dict[str, Any], leeway_seconds: int) -> None:
    now = time.time()
    exp, iat = claims.get("exp"), claims.get("iat")
    for name, value, check in (
        ("exp", exp, LaunchCheck.EXPIRY),
        ("iat", iat, LaunchCheck.ISSUED_AT),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise LaunchRejected(
                check,
                f"the id_token has no numeric {name}",
                "The platform must send exp and iat as seconds since 1970.",
            )
    assert isinstance(exp, int | float) and isinstance(iat, int | float)
    if now > exp + leeway_seconds:
        raise LaunchRejected(
            LaunchCheck.EXPIRY,
            f"the id_token expired {now - exp:.0f} s ago (leeway {leeway_seconds} s)",
            "Open the link again. If every launch fails so, this server's clock or the "
            "platform's is wrong: check both with NTP.",
        )
    if iat > now + leeway_seconds:
        raise LaunchRejected(
            LaunchCheck.ISSUED_AT,
            f"the id_token was issued {iat - now:.0f} s in the future "
            f"(more than the leeway of {leeway_seconds} s)",
            "The platform's clock runs ahead of this server's: check both with NTP, or raise "
            "LOOPGRADE_LTI_LEEWAY_SECONDS.",
        )


def _check_audience(claims: dict[str, Any], platform: LtiPlatform) -> None:
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud
    fix = (
        f"The platform must address its tokens to the client id registered here "
        f"({platform.client_id!r}); correct --client-id with loopgrade lti platforms add."
    )
    if not isinstance(audiences, list) or platform.client_id not in audiences:
        raise LaunchRejected(
            LaunchCheck.AUDIENCE,
            f"the id_token is for audience {aud!r}, not this tool's client id",
            fix,
        )
    azp = claims.get("azp")
    if (len(audiences) > 1 or azp is not None) and azp != platform.client_id:
        raise LaunchRejected(
            LaunchCheck.AUDIENCE,
            f"the id_token has several audiences and its azp is {azp!r}, not this tool's client id",
            fix,
        )


def _required(claims: dict[str, Any], message_type: MessageType) -> None:
    missing = [name for name in ("sub", "nonce", "iss") if not claims.get(name)]
    for name in ("deployment_id", "target_link_uri"):
        if not isinstance(claims.get(LTI_CLAIM + name), str) or not claims[LTI_CLAIM + name]:
            missing.append(LTI_CLAIM + name)
    roles = claims.get(LTI_CLAIM + "roles")
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        missing.append(LTI_CLAIM + "roles (an array of strings)")
    if message_type is MessageType.RESOURCE_LINK:
        link = claims.get(LTI_CLAIM + "resource_link")
        if not isinstance(link, dict) or not isinstance(link.get("id"), str) or not link["id"]:
            missing.append(LTI_CLAIM + "resource_link (with an id)")
    else:
        settings = claims.get(DL_CLAIM + "deep_linking_settings")
        if not isinstance(settings, dict) or not isinstance(
            settings.get("deep_link_return_url"), str
        ):
            missing.append(DL_CLAIM + "deep_linking_settings (with a deep_link_return_url)")
    too_long = [
        name
        for name in ("sub", LTI_CLAIM + "deployment_id")
        if isinstance(claims.get(name), str) and len(claims[name]) > MAX_CLAIM_CHARS
    ]
    if missing or too_long:
        problem = (
            f"the id_token lacks {', '.join(missing)}"
            if missing
            else f"{', '.join(too_long)} is over {MAX_CLAIM_CHARS} characters"
        )
        raise LaunchRejected(
            LaunchCheck.REQUIRED_CLAIMS,
            problem,
            "The platform must send every claim LTI 1.3 requires; check that the tool is "
            "set up as an LTI 1.3 (Advantage) tool, not 1.1.",
        )


def validate_launch(
    session: Session,
    key_cache: PlatformKeyCache,
    *,
    id_token: str,
    state: str,
    leeway_seconds: int,
    storage_value: str | None = None,
    same_origin: bool = False,
) -> ValidatedLaunch:
    """Check a launch (the platform's form post) and consume its state.

    The state is marked used before any other check, so a refused launch cannot be retried
    with it either; the caller commits that even when this raises. A login that used
    platform storage needs `storage_value`, read back from there by this tool's own page
    (`same_origin`).
    """
    login = _consume_state(session, state)
    _check_platform_storage(login, storage_value, same_origin=same_origin)
    if not id_token or len(id_token) > MAX_ID_TOKEN_CHARS:
        raise LaunchRejected(
            LaunchCheck.TOKEN_FORMAT,
            "the launch carries no id_token, or one over 64 KiB",
            "The platform must form-post id_token and state to /lti/launch.",
        )
    platform = session.get(LtiPlatform, login.platform_id)
    assert platform is not None  # a foreign key
    claims = _verified_claims(id_token, platform, key_cache)
    if claims.get("iss") != platform.issuer:
        raise LaunchRejected(
            LaunchCheck.ISSUER,
            f"the id_token is from issuer {claims.get('iss')!r}, but the login was started "
            f"by {platform.issuer!r}",
            "Register the platform with the issuer its tokens carry (--issuer).",
        )
    _check_audience(claims, platform)
    _check_times(claims, leeway_seconds)
    if not isinstance(claims.get("nonce"), str) or not secrets.compare_digest(
        claims["nonce"], login.nonce
    ):
        raise LaunchRejected(
            LaunchCheck.NONCE,
            "the id_token's nonce is not the one this login sent (a replayed token)",
            "Open the link in the platform again; a token can be used once only.",
        )
    raw_type = claims.get(LTI_CLAIM + "message_type")
    try:
        message_type = MessageType(str(raw_type))
    except ValueError:
        raise LaunchRejected(
            LaunchCheck.MESSAGE_TYPE,
            f"message type {raw_type!r} is not one this tool handles",
            "Place the tool as a resource link or a deep-linking (content selection) item.",
        ) from None
    version = claims.get(LTI_CLAIM + "version")
    if version != LTI_VERSION:
        raise LaunchRejected(
            LaunchCheck.VERSION,
            f"LTI version {version!r}, not {LTI_VERSION}",
            "Set the tool up on the platform as an LTI 1.3 tool.",
        )
    _required(claims, message_type)
    deployment_id: str = claims[LTI_CLAIM + "deployment_id"]
    known = session.scalars(
        select(LtiDeployment.id).where(
            LtiDeployment.platform_id == platform.id,
            LtiDeployment.deployment_id == deployment_id,
        )
    ).first()
    if known is None:
        raise LaunchRejected(
            LaunchCheck.DEPLOYMENT,
            f"deployment {deployment_id!r} is not registered for this platform",
            f"Add it: loopgrade lti platforms add --issuer {platform.issuer} --client-id "
            f"{platform.client_id} --deployment-id {deployment_id} (with the same URLs).",
        )
    return ValidatedLaunch(platform, claims, message_type, deployment_id)
