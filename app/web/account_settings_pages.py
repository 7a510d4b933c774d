"""The account page (/account): the owner's name, password, signed-in browsers, and deleting
the account."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.access import (
    CsrfViewerDep,
    SignedInUserDep,
    SignedInUserFormDep,
    Viewer,
    ViewerDep,
    clear_session_cookie,
    set_forget_drafts_cookie,
)
from app.courses.membership import CourseError
from app.db import SessionDep
from app.errors import as_sentence
from app.models import User
from app.people.accounts import (
    MIN_PASSWORD_CHARS,
    AccountError,
    change_password,
    check_display_name,
    end_sessions,
    has_password,
    live_sessions,
)
from app.people.deletion import courses_only_taught_by, delete_account
from app.rendering import render
from app.settings import SettingsDep

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)

DONE_NOTICES = {
    "name": "Your name is changed.",
    "password": "Your password is changed. Every other browser is signed out, and your "
    "personal tokens are revoked.",
    "reset": "Your new password is set. Every other browser is signed out, and your personal "
    "tokens are revoked.",
    "signed-out": "Every other browser is signed out, and your personal tokens are revoked.",
}


def _account_page(
    request: Request,
    session: SessionDep,
    viewer: Viewer,
    user: User,
    *,
    status_code: int = 200,
    **context: object,
) -> HTMLResponse:
    return render(
        request,
        viewer,
        "account.html",
        {
            "account": user,
            "has_password": has_password(user),
            "min_password": MIN_PASSWORD_CHARS,
            "web_sessions": live_sessions(session, user),
            "this_session_id": viewer.web_session.id if viewer.web_session else None,
            "only_instructor_of": courses_only_taught_by(session, user),
            **context,
        },
        status_code=status_code,
    )


@router.get("/account")
def account_page(
    request: Request, session: SessionDep, viewer: ViewerDep, user: SignedInUserDep, done: str = ""
) -> HTMLResponse:
    return _account_page(request, session, viewer, user, notice=DONE_NOTICES.get(done))


@router.post("/account/name", response_model=None)
def change_name_form(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    name: Annotated[str, Form()] = "",
) -> Response:
    try:
        checked = check_display_name(name)
        if not checked:
            raise AccountError("the name cannot be empty")
    except AccountError as exc:
        return _account_page(
            request, session, viewer, user, status_code=422, name_error=as_sentence(str(exc))
        )
    user.name = checked
    session.flush()
    return RedirectResponse("/account?done=name", status_code=303)


@router.post("/account/password", response_model=None)
def change_password_form(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    current_password: Annotated[str, Form()] = "",
    new_password: Annotated[str, Form()] = "",
    new_password_again: Annotated[str, Form()] = "",
) -> Response:
    try:
        if not has_password(user):
            raise AccountError("this account signs in through the LMS and has no password")
        if new_password != new_password_again:
            raise AccountError("the two new passwords differ")
        change_password(session, user, current=current_password, new=new_password)
    except AccountError as exc:
        return _account_page(
            request, session, viewer, user, status_code=422, password_error=as_sentence(str(exc))
        )
    assert viewer.web_session is not None
    end_sessions(session, user, except_session_id=viewer.web_session.id)
    return RedirectResponse("/account?done=password", status_code=303)


@router.post("/account/delete", response_model=None)
def delete_account_form(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    password: Annotated[str, Form()] = "",
    confirm: Annotated[str, Form()] = "",
) -> Response:
    try:
        if confirm != "delete":
            raise AccountError("tick the box that says what deleting does")
        delete_account(session, user, password=password)
    except (AccountError, CourseError) as exc:
        return _account_page(
            request, session, viewer, user, status_code=422, delete_error=as_sentence(str(exc))
        )
    response = RedirectResponse("/", status_code=303)
    clear_session_cookie(response, request, settings)
    set_forget_drafts_cookie(response, request, settings)
    return response


@router.post("/account/sign-out-others", response_model=None)
def sign_out_others_form(
    session: SessionDep, viewer: CsrfViewerDep, user: SignedInUserFormDep
) -> Response:
    assert viewer.web_session is not None
    end_sessions(session, user, except_session_id=viewer.web_session.id)
    return RedirectResponse("/account?done=signed-out", status_code=303)
