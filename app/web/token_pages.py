"""The personal access tokens page, `/account/tokens`: a signed-in learner creates, names,
lists and revokes the tokens their client uses (app/people/tokens.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.db import SessionDep
from app.errors import as_sentence
from app.hosts import public_base_url
from app.models import PersonalToken, User, utc_now
from app.people.tokens import (
    MAX_TOKEN_NAME_CHARS,
    TokenError,
    create_personal_token,
    lifetime_choices_days,
    revoke_personal_token,
    tokens_of,
)
from app.settings import Settings, SettingsDep
from app.web.rendering import PageError, render
from app.web.sessions import CsrfViewerDep, Viewer, ViewerDep, signed_in_user

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


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
        },
        status_code=status_code,
    )


@router.get("/account/tokens")
def tokens_page(
    request: Request, session: SessionDep, settings: SettingsDep, viewer: ViewerDep
) -> HTMLResponse:
    """Your tokens for the command-line client and notebooks, and a form for a new one."""
    user = signed_in_user(viewer)
    return _tokens_page(request, session, viewer, user, settings)


@router.post("/account/tokens")
def create_token(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    name: Annotated[str, Form()] = "",
    lifetime_days: Annotated[int, Form()] = 30,
) -> HTMLResponse:
    """A new token, shown on the answer once: it is never shown again."""
    user = signed_in_user(viewer)
    max_days = settings.personal_token_max_days
    try:
        created = create_personal_token(
            session, user, name=name, lifetime_days=lifetime_days, max_days=max_days
        )
    except TokenError as exc:
        return _tokens_page(
            request,
            session,
            viewer,
            user,
            settings,
            error=as_sentence(exc.message),
            name=name[:MAX_TOKEN_NAME_CHARS],
            status_code=422,
        )
    # Never cached: the page holds the secret.
    page = _tokens_page(request, session, viewer, user, settings, new_token=created)
    page.headers["Cache-Control"] = "no-store"
    return page


@router.post("/account/tokens/{token_id}/revoke", response_model=None)
def revoke_token(token_id: str, session: SessionDep, viewer: CsrfViewerDep) -> Response:
    """The token stops working at once."""
    user = signed_in_user(viewer)
    if revoke_personal_token(session, user, token_id) is None:
        raise PageError(404, "Not found", "You have no token with this id.")
    return RedirectResponse("/account/tokens", status_code=303)
