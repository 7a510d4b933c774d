"""Pages for people: sign up, sign in and out, the home page, joining and creating courses."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.access import (
    CsrfViewerDep,
    SignedInUserFormDep,
    ViewerDep,
    anonymous_learner,
    clear_session_cookie,
    client_address,
    end_session,
    had_session,
    is_known_browser,
    safe_next,
    set_forget_drafts_cookie,
    signed_in_response,
)
from app.courses.gradebook import practice_cells
from app.courses.membership import CourseError, courses_of, create_course, join_course
from app.courses.practice import courses_setting
from app.db import SessionDep
from app.errors import as_sentence
from app.models import SiteRole
from app.people.accounts import (
    MIN_PASSWORD_CHARS,
    AccountDisabled,
    AccountError,
    SignInLimits,
    SignInRefused,
    SignUpLimits,
    TooManySignIns,
    TooManySignUps,
    normalize_email,
    sign_in,
    sign_up,
)
from app.rendering import render
from app.settings import SettingsDep
from graders.exercises import list_exercises

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


def home_context(request: Request, session: SessionDep, viewer: ViewerDep) -> dict[str, object]:
    user = viewer.user
    exercises = list_exercises()
    cells = practice_cells(
        session,
        exercises,
        user_id=user.id if user else None,
        anonymous_learner=anonymous_learner(request, viewer),
    )
    return {
        "courses": courses_of(session, user) if user else [],
        "can_create_course": user is not None
        and user.site_role in (SiteRole.ADMIN, SiteRole.INSTRUCTOR),
        "unit": list(zip(exercises, cells, strict=True)),
        "in_courses": courses_setting(session, user.id if user else None),
    }


@router.get("/")
def home(
    request: Request, session: SessionDep, viewer: ViewerDep, unknown_join_code: str = ""
) -> HTMLResponse:
    """Signed in: your courses, join one, create one; everyone: the unit to practise."""
    context = home_context(request, session, viewer)
    if unknown_join_code and viewer.user is not None:
        # Straight after signing up with a join code that matched no course.
        context["join_error"] = (
            f"Your account is ready, but no course has the join code “{unknown_join_code}”. "
            "Check it with your instructor and enter it again here."
        )
        context["join_code"] = unknown_join_code
    return render(request, viewer, "home.html", context)


@router.get("/sign-in")
def sign_in_page(
    request: Request, viewer: ViewerDep, next: str = "/", ended: bool = False
) -> Response:
    """`ended`: sent here by a submission whose session had ended (its code is kept)."""
    if viewer.user is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    # A session cookie of ours that names no live session: it ended (timed out, or signed out
    # from another browser). Say so, and forget the cookie.
    session_ended = had_session(request)
    response = render(
        request,
        viewer,
        "sign_in.html",
        {
            "next": safe_next(next),
            "email": "",
            "submission_kept": ended,
            "session_ended": session_ended,
        },
    )
    if session_ended:
        clear_session_cookie(response, request, request.app.state.settings)
    return response


@router.post("/sign-in", response_model=None)
def sign_in_form(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    email: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    try:
        user = sign_in(
            session,
            email=email,
            password=password,
            client_address=client_address(request),
            limits=SignInLimits.from_settings(settings),
            known_browser=is_known_browser(request, normalize_email(email)),
        )
    except TooManySignIns as exc:
        minutes = max(1, round(exc.retry_after_seconds / 60))
        return render(
            request,
            viewer,
            "sign_in.html",
            {
                "next": safe_next(next),
                "email": email,
                "error": f"{exc} Wait about {minutes} minute{'s' if minutes != 1 else ''} "
                "and try again.",
            },
            status_code=429,
            headers={"Retry-After": str(exc.retry_after_seconds)},
        )
    except SignInRefused:
        return render(
            request,
            viewer,
            "sign_in.html",
            {"next": safe_next(next), "email": email, "error": "Wrong email or password."},
            status_code=401,
        )
    except AccountDisabled:
        return render(
            request,
            viewer,
            "sign_in.html",
            {
                "next": safe_next(next),
                "email": email,
                "error": "This account is disabled: ask an administrator of this server.",
            },
            status_code=403,
        )
    return signed_in_response(request, settings, session, user, next)


@router.get("/sign-up")
def sign_up_page(
    request: Request, viewer: ViewerDep, settings: SettingsDep, code: str = ""
) -> Response:
    if viewer.user is not None:
        return RedirectResponse("/", status_code=303)
    return render(
        request,
        viewer,
        "sign_up.html",
        {
            "allowed": settings.allow_sign_up,
            "form": {"join_code": code},
            "min_password": MIN_PASSWORD_CHARS,
        },
        status_code=200 if settings.allow_sign_up else 403,
    )


@router.post("/sign-up", response_model=None)
def sign_up_form(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    email: Annotated[str, Form()] = "",
    name: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    join_code: Annotated[str, Form()] = "",
) -> Response:
    form = {"email": email, "name": name, "join_code": join_code}
    context = {"allowed": settings.allow_sign_up, "form": form, "min_password": MIN_PASSWORD_CHARS}
    if not settings.allow_sign_up:
        return render(request, viewer, "sign_up.html", context, status_code=403)
    try:
        user = sign_up(
            session,
            email=email,
            name=name,
            password=password,
            client_address=client_address(request),
            limits=SignUpLimits.from_settings(settings),
        )
    except (AccountError, TooManySignUps) as exc:
        return render(
            request,
            viewer,
            "sign_up.html",
            {**context, "error": as_sentence(str(exc))},
            status_code=exc.status_code,
            headers=exc.headers,
        )
    target = "/"
    if join_code.strip():
        # The code is optional: one that matches no course never costs the account. The home
        # page says so and offers its join form with the code as typed.
        try:
            target = f"/courses/{join_course(session, user=user, join_code=join_code).id}"
        except CourseError:
            target = "/?" + urlencode({"unknown_join_code": join_code.strip()[:64]})
    return signed_in_response(request, settings, session, user, target)


@router.post("/sign-out", response_model=None)
def sign_out(
    request: Request, session: SessionDep, settings: SettingsDep, viewer: CsrfViewerDep
) -> Response:
    if viewer.web_session is not None:
        end_session(session, viewer.web_session)
    response = RedirectResponse("/", status_code=303)
    clear_session_cookie(response, request, settings)
    set_forget_drafts_cookie(response, request, settings)
    return response


@router.post("/join", response_model=None)
def join(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    join_code: Annotated[str, Form()] = "",
) -> Response:
    try:
        course = join_course(session, user=user, join_code=join_code)
    except CourseError as exc:
        return _home_with_error(
            request, session, viewer, "join_error", as_sentence(str(exc)), join_code=join_code
        )
    return RedirectResponse(f"/courses/{course.id}", status_code=303)


@router.post("/courses", response_model=None)
def create_course_form(
    request: Request,
    session: SessionDep,
    viewer: CsrfViewerDep,
    user: SignedInUserFormDep,
    name: Annotated[str, Form()] = "",
) -> Response:
    if user.site_role not in (SiteRole.ADMIN, SiteRole.INSTRUCTOR):
        return _home_with_error(
            request,
            session,
            viewer,
            "create_error",
            "Only instructors can create courses: ask an administrator.",
            status_code=403,
        )
    try:
        course = create_course(session, name=name, instructor=user)
    except CourseError as exc:
        return _home_with_error(request, session, viewer, "create_error", as_sentence(str(exc)))
    return RedirectResponse(f"/courses/{course.id}/settings?done=created", status_code=303)


def _home_with_error(
    request: Request,
    session: SessionDep,
    viewer: ViewerDep,
    field: str,
    message: str,
    *,
    status_code: int = 422,
    join_code: str = "",
) -> HTMLResponse:
    context = {**home_context(request, session, viewer), field: message, "join_code": join_code}
    return render(request, viewer, "home.html", context, status_code=status_code)
