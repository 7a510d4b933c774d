"""Forgot password: ask for a reset link by email, and set a new password with it.

The answer to a request is the same whether or not an account has the email, and the mail is
sent after the response (a background task), so its time says nothing either.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Form, Request
from fastapi.responses import HTMLResponse, Response

from app.access import CsrfViewerDep, ViewerDep, client_address, signed_in_response
from app.db import SessionDep
from app.errors import as_sentence
from app.hosts import public_base_url
from app.people.accounts import MIN_PASSWORD_CHARS, AccountError
from app.people.mail import MailNotSent, compose, send_mail
from app.people.recovery import (
    ResetLimits,
    ResetLinkInvalid,
    TooManyResetRequests,
    find_reset_request,
    request_password_reset,
    reset_mail_body,
    reset_password,
    reset_url,
)
from app.rendering import render
from app.settings import Settings, SettingsDep

log = logging.getLogger("loopgrade.accounts")
router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


def _mail_reset_link(settings: Settings, *, to: str, name: str, link: str) -> None:
    message = compose(
        settings,
        to=to,
        subject="Set a new loopgrade password",
        body=reset_mail_body(
            name=name, link=link, max_age_seconds=settings.password_reset_max_age_seconds
        ),
    )
    try:
        send_mail(settings, message)
    except MailNotSent as exc:
        log.error("password reset link not mailed: %s", exc)


@router.get("/forgot-password")
def forgot_password_page(request: Request, viewer: ViewerDep) -> HTMLResponse:
    return render(request, viewer, "forgot_password.html", {"email": "", "sent": False})


@router.post("/forgot-password", response_model=None)
def forgot_password_form(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    background: BackgroundTasks,
    email: Annotated[str, Form()] = "",
) -> Response:
    try:
        link = request_password_reset(
            session,
            email=email,
            client_address=client_address(request),
            limits=ResetLimits.from_settings(settings),
        )
    except TooManyResetRequests as exc:
        return render(
            request,
            viewer,
            "forgot_password.html",
            {"email": email, "sent": False, "error": str(exc)},
            status_code=exc.status_code,
            headers=exc.headers,
        )
    if link is not None:
        url = reset_url(public_base_url(request, settings), link.token)
        # After the response, so that its time is the same whether or not mail goes out.
        background.add_task(
            _mail_reset_link, settings, to=link.user.email, name=link.user.name, link=url
        )
    return render(request, viewer, "forgot_password.html", {"email": email, "sent": True})


@router.get("/reset-password")
def reset_password_page(
    request: Request, session: SessionDep, viewer: ViewerDep, token: str = ""
) -> HTMLResponse:
    if find_reset_request(session, token) is None:
        raise ResetLinkInvalid()
    return render(
        request,
        viewer,
        "reset_password.html",
        {"token": token, "min_password": MIN_PASSWORD_CHARS},
    )


@router.post("/reset-password", response_model=None)
def reset_password_form(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    token: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    password_again: Annotated[str, Form()] = "",
) -> Response:
    try:
        if password != password_again:
            raise AccountError("the two passwords differ")
        user = reset_password(session, token=token, password=password)
    except AccountError as exc:
        return render(
            request,
            viewer,
            "reset_password.html",
            {"token": token, "min_password": MIN_PASSWORD_CHARS, "error": as_sentence(str(exc))},
            status_code=exc.status_code,
        )
    return signed_in_response(request, settings, session, user, "/account?done=reset")
