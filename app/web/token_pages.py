"""The personal access tokens page, `/account/tokens`: a signed-in learner creates, names,
lists and revokes the tokens their client uses (app/people/tokens.py).

Creating one asks for the password again (a browser left signed in must not mint a secret that
outlives its session); an account without a password (made by an LMS launch) instead needs a
session started within the last `RECENT_SIGN_IN_SECONDS`, by opening the activity again."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access import (
    CsrfViewerDep,
    SignedInUserDep,
    SignedInUserFormDep,
    Viewer,
    ViewerDep,
    client_address,
    signed_in_user,
)
from app.db import SessionDep
from app.errors import AppError, as_sentence
from app.hosts import public_base_url
from app.models import PersonalToken, User, utc_now
from app.people.accounts import (
    SignInLimits,
    SignInRefused,
    TooManySignIns,
    has_password,
    sign_in,
)
from app.people.tokens import (
    MAX_LIVE_TOKENS,
    MAX_TOKEN_NAME_CHARS,
    TokenError,
    create_personal_token,
    lifetime_choices_days,
    revoke_personal_token,
    revoke_personal_tokens,
    tokens_of,
)
from app.rendering import PageError, render
from app.settings import Settings, SettingsDep

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

RECENT_SIGN_IN_SECONDS = 10 * 60


class ReauthenticationNeeded(AppError):
    status_code = 401
    title = "Confirm it is you"


def confirm_it_is_them(
    request: Request, session: Session, settings: Settings, viewer: Viewer, password: str
) -> None:
    """Raise ReauthenticationNeeded (or TooManySignIns) unless the password is the account's,
    checked as a sign-in is (its failures count toward the sign-in limits); an account with no
    password needs a session started within RECENT_SIGN_IN_SECONDS."""
    user = signed_in_user(viewer)
    if not has_password(user):
        assert viewer.web_session is not None
        age = utc_now() - viewer.web_session.created_at
        if age > timedelta(seconds=RECENT_SIGN_IN_SECONDS):
            raise ReauthenticationNeeded(
                "your account signs in through your LMS: open the activity from the LMS again, "
                f"then create the token within {RECENT_SIGN_IN_SECONDS // 60} minutes"
            )
        return
    try:
        sign_in(
            session,
            email=user.email,
            password=password,
            client_address=client_address(request),
            limits=SignInLimits.from_settings(settings),
            known_browser=True,
        )
    except SignInRefused:
        raise ReauthenticationNeeded("the password is not right") from None


def _token_state(token: PersonalToken) -> str:
    if token.revoked_at is not None:
        return "revoked"
    return "expired" if token.expires_at <= utc_now() else "live"


def _tokens_page(
    request: Request,
    session: SessionDep,
    viewer: Viewer,
    user: User,
    settings: Settings,
    *,
    new_token: tuple[PersonalToken, str] | None = None,
    error: str = "",
    name: str = "",
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    return render(
        request,
        viewer,
        "account_tokens.html",
        {
            "tokens": [(token, _token_state(token)) for token in tokens_of(session, user)],
            "lifetimes_days": lifetime_choices_days(settings.personal_token_max_days),
            "max_name_chars": MAX_TOKEN_NAME_CHARS,
            "new_token": new_token,
            "error": error,
            "name": name,
            "server_url": public_base_url(request, settings),
            "has_password": has_password(user),
            "max_live_tokens": MAX_LIVE_TOKENS,
        },
        status_code=status_code,
        headers=headers,
    )


@router.get("/account/tokens")
def tokens_page(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: ViewerDep,
    user: SignedInUserDep,
) -> HTMLResponse:
    """Your tokens for the command-line client and notebooks, and a form for a new one."""
    return _tokens_page(request, session, viewer, user, settings)


@router.post("/account/tokens")
def create_token(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    name: Annotated[str, Form()] = "",
    lifetime_days: Annotated[int, Form()] = 30,
    password: Annotated[str, Form()] = "",
) -> HTMLResponse:
    """A new token, shown on the answer once: it is never shown again."""
    max_days = settings.personal_token_max_days
    try:
        confirm_it_is_them(request, session, settings, viewer, password)
        created = create_personal_token(
            session, user, name=name, lifetime_days=lifetime_days, max_days=max_days
        )
    except TooManySignIns as exc:
        return _tokens_page(
            request,
            session,
            viewer,
            user,
            settings,
            error=f"{exc} Wait a few minutes and try again.",
            name=name[:MAX_TOKEN_NAME_CHARS],
            status_code=429,
            headers={"Retry-After": str(exc.retry_after_seconds)},
        )
    except (TokenError, ReauthenticationNeeded) as exc:
        return _tokens_page(
            request,
            session,
            viewer,
            user,
            settings,
            error=as_sentence(exc.message),
            name=name[:MAX_TOKEN_NAME_CHARS],
            status_code=exc.status_code,
        )
    # Never cached: the page holds the secret.
    page = _tokens_page(request, session, viewer, user, settings, new_token=created)
    page.headers["Cache-Control"] = "no-store"
    return page


@router.post("/account/tokens/revoke-all", response_model=None)
def revoke_all_tokens(session: SessionDep, user: SignedInUserFormDep) -> Response:
    """Every live token stops working at once."""
    revoke_personal_tokens(session, user)
    return RedirectResponse("/account/tokens", status_code=303)


@router.post("/account/tokens/{token_id}/revoke", response_model=None)
def revoke_token(token_id: str, session: SessionDep, user: SignedInUserFormDep) -> Response:
    """The token stops working at once."""
    if revoke_personal_token(session, user, token_id) is None:
        raise PageError(404, "Not found", "You have no token with this id.")
    return RedirectResponse("/account/tokens", status_code=303)
