"""Request plumbing below the surfaces (app/web, app/api, app/lti): who is viewing, signed in
by a server-side session in a signed cookie; CSRF tokens for every form; where a sign-in may
send the browser. One idea, who a request is, in one module below every surface, so that no
surface imports another for it; what the viewer may do is in `app.permissions`.

The session cookie holds a random token and its HMAC; the database keeps only the token's
SHA-256, the user and the session's CSRF token, so signing out (deleting the row) ends it
everywhere. A browser that is not signed in gets a signed random nonce in a second cookie,
and its forms carry an HMAC of that nonce (the double-submit pattern, signed).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Form, Header, Request, Response
from fastapi.responses import RedirectResponse
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.db import SessionDep
from app.errors import AppError
from app.models import User, WebSession, utc_now
from app.settings import Settings, SettingsDep

SESSION_COOKIE = "loopgrade_session"
CSRF_COOKIE = "loopgrade_csrf"


# A browser's User-Agent, in the order that tells them apart: Edge and Opera say "Chrome" too,
# and Chrome says "Safari". The version is the major one; headless Chrome is Chrome.
_BROWSERS = (
    ("Edge", re.compile(r"\bEdg(?:e|A|iOS)?/(\d+)")),
    ("Opera", re.compile(r"\bOPR/(\d+)")),
    ("Samsung Internet", re.compile(r"\bSamsungBrowser/(\d+)")),
    ("Firefox", re.compile(r"\b(?:Firefox|FxiOS)/(\d+)")),
    ("Chrome", re.compile(r"\b(?:HeadlessChrome|Chrome|CriOS)/(\d+)")),
    ("Safari", re.compile(r"\bVersion/(\d+)[.\d]* (?:Mobile/\S+ )?Safari/")),
)
_SYSTEMS = (
    ("Android", re.compile(r"\bAndroid\b")),
    ("iPhone", re.compile(r"\biPhone\b")),
    ("iPad", re.compile(r"\biPad\b")),
    ("ChromeOS", re.compile(r"\bCrOS\b")),
    ("Windows", re.compile(r"\bWindows\b")),
    ("macOS", re.compile(r"\bMac OS X\b")),
    ("Linux", re.compile(r"\bLinux\b")),
)


def browser_name(user_agent: str | None) -> str:
    """A signed-in browser as a person knows it, from its User-Agent: "Chrome 120 on Android";
    "unknown browser" when it says nothing we know (the raw string is no help to a reader)."""
    agent = user_agent or ""
    name = next(
        (f"{name} {found[1]}" for name, pattern in _BROWSERS if (found := pattern.search(agent))),
        None,
    )
    system = next((name for name, pattern in _SYSTEMS if pattern.search(agent)), None)
    if name is None:
        return f"unknown browser on {system}" if system else "unknown browser"
    return f"{name} on {system}" if system else name


def load_secret_key(settings: Settings) -> bytes:
    """LOOPGRADE_SECRET_KEY, or a random key made once and kept in <data_dir>/secret_key."""
    if settings.secret_key:
        return settings.secret_key.encode()
    path = settings.data_dir / "secret_key"
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        # O_EXCL: two processes starting at once agree on the first one's key.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    key = secrets.token_urlsafe(48).encode()
    with os.fdopen(fd, "wb") as file:
        file.write(key + b"\n")
    return key


def _mac(secret_key: bytes, purpose: str, value: str) -> str:
    return hmac.new(secret_key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


def sign(secret_key: bytes, purpose: str, value: str) -> str:
    return f"{value}.{_mac(secret_key, purpose, value)}"


def unsign(secret_key: bytes, purpose: str, signed: str | None) -> str | None:
    """The value of a `sign`ed string, or None when it was not signed with this key."""
    if not signed or "." not in signed:
        return None
    value, mac = signed.rsplit(".", 1)
    return value if hmac.compare_digest(mac, _mac(secret_key, purpose, value)) else None


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def start_session(
    session: Session,
    user: User,
    request: Request,
    *,
    max_age_seconds: int,
    lms_origin: str | None = None,
) -> tuple[WebSession, str]:
    """A new session for `user` in the browser of `request` (`lms_origin`: started by a launch
    from that LMS page); returns it and the token, which only the cookie keeps."""
    token = secrets.token_urlsafe(32)
    web_session = WebSession(
        token_hash=_token_hash(token),
        user_id=user.id,
        csrf_token=secrets.token_urlsafe(32),
        expires_at=utc_now() + timedelta(seconds=max_age_seconds),
        client_address=client_address(request),
        user_agent=request.headers.get("user-agent", "")[:200] or None,
        lms_origin=lms_origin,
    )
    session.add(web_session)
    # Expired sessions of this user are only clutter.
    session.execute(
        delete(WebSession).where(WebSession.user_id == user.id, WebSession.expires_at < utc_now())
    )
    session.flush()
    return web_session, token


def find_session(session: Session, token: str) -> WebSession | None:
    """The live session with this token, or None."""
    return session.scalars(
        select(WebSession).where(
            WebSession.token_hash == _token_hash(token), WebSession.expires_at > utc_now()
        )
    ).one_or_none()


def end_session(session: Session, web_session: WebSession) -> None:
    session.delete(web_session)
    session.flush()


def cookie_is_secure(request: Request, settings: Settings) -> bool:
    if settings.cookie_secure == "auto":
        # SameSite=None is only accepted by browsers on Secure cookies.
        return request.url.scheme == "https" or settings.cookie_samesite == "none"
    return settings.cookie_secure == "always"


@dataclass
class Viewer:
    """Who is looking at a page: a user (or nobody) and the CSRF token their forms carry."""

    user: User | None
    web_session: WebSession | None
    csrf_token: str
    # A nonce to put in the CSRF cookie with the response (first form of a visitor).
    new_csrf_nonce: str | None = None


def get_secret_key(request: Request) -> bytes:
    secret_key: bytes = request.app.state.secret_key
    return secret_key


def had_session(request: Request) -> bool:
    """The browser holds a session cookie of ours (signed by us), live or not."""
    return (
        unsign(get_secret_key(request), "session", request.cookies.get(SESSION_COOKIE)) is not None
    )


def get_viewer(request: Request, session: SessionDep) -> Viewer:
    secret_key = get_secret_key(request)
    token = unsign(secret_key, "session", request.cookies.get(SESSION_COOKIE))
    web_session = find_session(session, token) if token else None
    if web_session is not None:
        user = session.get(User, web_session.user_id)
        # Disabling ends the account's sessions; this also holds for one started meanwhile.
        if user is not None and user.disabled_at is None:
            return Viewer(user, web_session, web_session.csrf_token)
    nonce = unsign(secret_key, "csrf-cookie", request.cookies.get(CSRF_COOKIE))
    new_nonce = None
    if nonce is None:
        nonce = new_nonce = secrets.token_urlsafe(24)
    return Viewer(None, None, _mac(secret_key, "csrf-form", nonce), new_csrf_nonce=new_nonce)


ViewerDep = Annotated[Viewer, Depends(get_viewer)]


def set_cookies(response: Response, request: Request, settings: Settings, viewer: Viewer) -> None:
    """Give a new visitor their CSRF cookie with this response."""
    if viewer.new_csrf_nonce is None:
        return
    response.set_cookie(
        CSRF_COOKIE,
        sign(get_secret_key(request), "csrf-cookie", viewer.new_csrf_nonce),
        httponly=True,
        samesite=settings.cookie_samesite,
        secure=cookie_is_secure(request, settings),
    )


def set_session_cookie(
    response: Response, request: Request, settings: Settings, token: str
) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        sign(get_secret_key(request), "session", token),
        max_age=settings.session_max_age_seconds,
        httponly=True,
        samesite=settings.cookie_samesite,
        secure=cookie_is_secure(request, settings),
    )


# A browser that signed in to an account keeps an HMAC of its email: the account's sign-in
# brake (too many failures from everywhere) does not stop its owner's own browser.
KNOWN_BROWSER_COOKIE = "loopgrade_known"
KNOWN_BROWSER_MAX_AGE_SECONDS = 365 * 24 * 3600


def set_known_browser_cookie(
    response: Response, request: Request, settings: Settings, email: str
) -> None:
    response.set_cookie(
        KNOWN_BROWSER_COOKIE,
        _mac(get_secret_key(request), "known-browser", email),
        max_age=KNOWN_BROWSER_MAX_AGE_SECONDS,
        httponly=True,
        samesite=settings.cookie_samesite,
        secure=cookie_is_secure(request, settings),
    )


def is_known_browser(request: Request, email: str) -> bool:
    """This browser signed in to the account of `email` (normalized) before."""
    cookie = request.cookies.get(KNOWN_BROWSER_COOKIE, "")
    expected = _mac(get_secret_key(request), "known-browser", email)
    return hmac.compare_digest(cookie.encode(), expected.encode())


def client_address(request: Request) -> str:
    """Who is asking, as limits count it: the connection's address, or the one a trusted proxy
    names (`LOOPGRADE_TRUSTED_PROXIES`, applied by app.main before any route runs).

    An IPv6 client is its /64, which one home or phone gets whole: per address it would have
    2**64 addresses to spread over.
    """
    host = request.client.host if request.client else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host[:64] or "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def clear_session_cookie(response: Response, request: Request, settings: Settings) -> None:
    response.delete_cookie(
        SESSION_COOKIE,
        httponly=True,
        samesite=settings.cookie_samesite,
        secure=cookie_is_secure(request, settings),
    )


# Set on the answer to "Sign out": the next page's script (static/forget-drafts.js) removes the
# drafts this browser kept for signed-in learners (their code, readable by the next person at a
# shared computer), then this cookie. The server keeps each learner's confirmed draft.
FORGET_DRAFTS_COOKIE = "loopgrade_forget_drafts"
FORGET_DRAFTS_MAX_AGE_SECONDS = 24 * 3600


def set_forget_drafts_cookie(response: Response, request: Request, settings: Settings) -> None:
    response.set_cookie(
        FORGET_DRAFTS_COOKIE,
        "1",
        max_age=FORGET_DRAFTS_MAX_AGE_SECONDS,
        httponly=False,  # read and removed by the page's script
        samesite=settings.cookie_samesite,
        secure=cookie_is_secure(request, settings),
    )


class CsrfRejected(AppError):
    """A form without this browser's CSRF token, or posted from another site."""

    status_code = 403
    title = "Form expired"

    def __init__(self, *, session_ended: bool = False) -> None:
        if session_ended:
            # The usual cause by far: the page was opened signed in, and the session ended.
            self.title = "Signed out"
            super().__init__(
                "Your session ended before this form was sent, so nothing was saved. Sign in "
                "again, then open the page and send it again."
            )
            return
        super().__init__(
            "This form was not sent from this site's page, or the page was open from before "
            "you signed in or out. Go back, reload the page and send it again."
        )


def same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        # Old browsers send none; the token alone decides. "null" comes from sandboxed frames.
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


def csrf_is_valid(request: Request, viewer: Viewer, csrf_token: str) -> bool:
    """The token is this browser's, and the Origin (if sent) ours."""
    return same_origin(request) and hmac.compare_digest(
        csrf_token.encode(), viewer.csrf_token.encode()
    )


def require_csrf(
    request: Request,
    viewer: ViewerDep,
    csrf_token: Annotated[str, Form()] = "",
) -> Viewer:
    """Every form POST carries the page's CSRF token."""
    if not csrf_is_valid(request, viewer, csrf_token):
        raise CsrfRejected(session_ended=viewer.user is None and had_session(request))
    return viewer


CsrfViewerDep = Annotated[Viewer, Depends(require_csrf)]
CSRF_HEADER = "X-CSRF-Token"


def require_csrf_header(
    request: Request,
    viewer: ViewerDep,
    csrf_token: Annotated[str, Header(alias=CSRF_HEADER)] = "",
) -> Viewer:
    """Every JSON write from a page's script carries the page's CSRF token in a header."""
    if not csrf_is_valid(request, viewer, csrf_token):
        raise CsrfRejected()
    return viewer


CsrfHeaderViewerDep = Annotated[Viewer, Depends(require_csrf_header)]


class SignInRequired(Exception):
    """The page needs a signed-in user: send the browser to sign in, then back."""


LEARNER_COOKIE = "loopgrade_learner"
_LEARNER_COOKIE_VALUE = re.compile(r"web:[A-Za-z0-9_-]{16,64}")


def anonymous_learner(request: Request, viewer: Viewer) -> str | None:
    if viewer.user is not None:
        return None
    learner = request.cookies.get(LEARNER_COOKIE, "")
    return learner if _LEARNER_COOKIE_VALUE.fullmatch(learner) else None


def signed_in_user(viewer: ViewerDep) -> User:
    if viewer.user is None:
        raise SignInRequired()
    return viewer.user


def signed_in_form_user(viewer: CsrfViewerDep) -> User:
    """The signed-in user who sent a form, its CSRF token checked first."""
    return signed_in_user(viewer)


# Who a page is for: anyone signed in (a learner, an instructor, an admin). A form's variant
# checks the CSRF token first, whatever order a route declares its dependencies in.
SignedInUserDep = Annotated[User, Depends(signed_in_user)]
SignedInUserFormDep = Annotated[User, Depends(signed_in_form_user)]


def safe_next(target: str | None) -> str:
    """Where to go after signing in: only a path on this site (no //host or scheme)."""
    # Browsers drop tabs and newlines from URLs, so "/\t/evil.example" would become "//evil...".
    if any(c.isspace() or ord(c) < 32 for c in target or ""):
        return "/"
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def signed_in_response(
    request: Request, settings: SettingsDep, session: SessionDep, user: User, target: str
) -> Response:
    _, token = start_session(
        session, user, request, max_age_seconds=settings.session_max_age_seconds
    )
    response = RedirectResponse(safe_next(target), status_code=303)
    set_session_cookie(response, request, settings, token)
    set_known_browser_cookie(response, request, settings, user.email)
    return response
