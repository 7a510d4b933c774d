"""The tool's LTI addresses: login, launch, JWKS, configuration, and the pages after a launch.

One idea over 400 lines: the tool's fixed LTI addresses, which operators paste into their
platforms.

Operators paste these, so they do not move: `GET|POST /lti/login`, `POST /lti/launch`,
`GET /lti/jwks` (also `/.well-known/jwks.json`), `GET /lti/config`, and `/lti/admin`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, FastAPI, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import ChoiceLoader, FileSystemLoader
from sqlalchemy.orm import Session

from app.access import (
    CsrfViewerDep,
    SignedInUserDep,
    SignedInUserFormDep,
    ViewerDep,
    client_address,
    get_secret_key,
    safe_next,
    signed_in_user,
    start_session,
)
from app.courses.membership import assignments_of, require_instructor, require_member
from app.db import SessionDep, keep_on_error_response
from app.hosts import public_base_url
from app.integrations import ags
from app.integrations.framing import FrameAncestors
from app.integrations.keys import key_sealing, published_keys, tool_jwks
from app.integrations.launch import (
    LaunchRejected,
    LoginLimits,
    MessageType,
    begin_login,
    login_awaiting_storage,
    storage_key,
    validate_launch,
)
from app.integrations.models import LtiContext, LtiPlatform, LtiResourceLink
from app.integrations.platforms import PlatformKeyCache, deployments_of, list_platforms
from app.integrations.provisioning import provision
from app.lti.deep_linking import DeepLinkRequest, deep_link_request, deep_link_response_jwt
from app.lti.tickets import create_ticket, redeem_ticket, set_framed_session_cookie
from app.models import CourseRole, User
from app.rendering import (
    PAGE_HEADERS,
    PageError,
    error_page,
    render,
    templates,
)
from app.settings import Settings, SettingsDep
from graders.exercise import Exercise

router = APIRouter(include_in_schema=False)

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
AGS_SCOPES = [
    "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
    "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly",
    "https://purl.imsglobal.org/spec/lti-ags/scope/score",
]
NRPS_SCOPE = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"


def install_lti(app: FastAPI, settings: Settings) -> None:
    """The LTI routes, their error page and the platforms' key cache."""
    loader = templates.env.loader
    if not isinstance(loader, ChoiceLoader):
        templates.env.loader = ChoiceLoader([loader, FileSystemLoader(TEMPLATES_DIR)])  # type: ignore[list-item]
    app.state.platform_keys = PlatformKeyCache(
        refetch_interval_seconds=settings.lti_jwks_refetch_interval_seconds
    )

    @app.exception_handler(LaunchRejected)
    async def on_launch_rejected(request: Request, exc: LaunchRejected) -> Response:
        return rejected_page(request, exc)

    app.add_middleware(FrameAncestors)
    app.include_router(router)


def tool_url(request: Request, settings: Settings, path: str) -> str:
    """An absolute URL of this tool, as LMSs must be told it."""
    return public_base_url(request, settings) + path


def tool_urls(request: Request, settings: Settings) -> dict[str, str]:
    return {
        "login": tool_url(request, settings, "/lti/login"),
        "launch": tool_url(request, settings, "/lti/launch"),
        "jwks": tool_url(request, settings, "/lti/jwks"),
        "config": tool_url(request, settings, "/lti/config"),
    }


def rejected_page(request: Request, exc: LaunchRejected) -> Response:
    """A refused login or launch: the check that failed and what to fix."""
    return templates.TemplateResponse(
        request,
        "lti/rejected.html",
        {"error": exc, "viewer": None, "user": None, "csrf_token": ""},
        status_code=400,
        headers=PAGE_HEADERS,
    )


def platform_storage_page(request: Request, **context: Any) -> Response:
    """The page that talks to the LMS page's storage (static/lti-storage.js), then goes on."""
    return templates.TemplateResponse(
        request,
        "lti/platform_storage.html",
        {**context, "viewer": None, "user": None, "csrf_token": ""},
        headers=PAGE_HEADERS,
    )


def from_this_origin(request: Request, settings: Settings) -> bool:
    """The request was sent by one of this tool's own pages (not posted from another site)."""
    if request.headers.get("sec-fetch-site") == "same-origin":
        return True
    return request.headers.get("origin") == tool_url(request, settings, "")


def platform_origin(session: Session, platform_id: str) -> str:
    """Where platform storage messages go: the origin of the platform's OIDC auth URL."""
    platform = session.get(LtiPlatform, platform_id)
    assert platform is not None  # a foreign key
    auth = urlsplit(platform.auth_url)
    return f"{auth.scheme}://{auth.netloc}"


def _login(
    request: Request, session: Session, settings: Settings, params: dict[str, str]
) -> Response:
    login = begin_login(
        session,
        params,
        redirect_uri=tool_url(request, settings, "/lti/launch"),
        client_address=client_address(request),
        limits=LoginLimits.from_settings(settings),
    )
    if login.storage_target is None:
        return RedirectResponse(login.auth_redirect, status_code=302)
    # LTI Platform Storage: the state goes into the LMS page first (lti.put_data), then on.
    return platform_storage_page(
        request,
        action="put",
        target=login.storage_target,
        key=login.storage_key,
        value=login.storage_value,
        next_url=login.auth_redirect,
        platform_origin=login.platform_origin,
    )


@router.get("/lti/login")
def login_get(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """OIDC login initiation (third-party initiated), by GET."""
    return _login(request, session, settings, dict(request.query_params))


@router.post("/lti/login")
def login_post(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    iss: Annotated[str, Form()] = "",
    login_hint: Annotated[str, Form()] = "",
    target_link_uri: Annotated[str, Form()] = "",
    lti_message_hint: Annotated[str, Form()] = "",
    lti_deployment_id: Annotated[str, Form()] = "",
    client_id: Annotated[str, Form()] = "",
    lti_storage_target: Annotated[str, Form()] = "",
) -> Response:
    """OIDC login initiation (third-party initiated), by form POST."""
    params = {
        "iss": iss,
        "login_hint": login_hint,
        "target_link_uri": target_link_uri,
        "lti_message_hint": lti_message_hint,
        "lti_deployment_id": lti_deployment_id,
        "client_id": client_id,
        "lti_storage_target": lti_storage_target,
    }
    return _login(request, session, settings, params)


@router.post("/lti/launch")
def launch(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    id_token: Annotated[str, Form()] = "",
    state: Annotated[str, Form()] = "",
    lti_storage_value: Annotated[str | None, Form()] = None,
) -> Response:
    """The platform's form post of the id_token: check it, provision, hand the browser on."""
    key_cache: PlatformKeyCache = request.app.state.platform_keys
    awaiting = login_awaiting_storage(session, state) if lti_storage_value is None else None
    if awaiting is not None:
        # The login put its state in the LMS page: this page reads it back (lti.get_data)
        # and posts the launch again, from this origin, with what it read.
        return platform_storage_page(
            request,
            action="get",
            target=awaiting.storage_target,
            key=storage_key(state),
            platform_origin=platform_origin(session, awaiting.platform_id),
            launch={"id_token": id_token, "state": state},
        )
    try:
        validated = validate_launch(
            session,
            key_cache,
            id_token=id_token,
            state=state,
            leeway_seconds=settings.lti_leeway_seconds,
            storage_value=lti_storage_value,
            same_origin=from_this_origin(request, settings),
        )
    except LaunchRejected as exc:
        # The state stays used: a refused launch cannot be replayed either. Answered here,
        # not raised: a raised error would close the request's session before its commit.
        keep_on_error_response(session)
        return rejected_page(request, exc)
    provisioned = provision(session, validated)
    if provisioned.new_frame_origin:
        request.app.state.frame_ancestors.forget()
    if provisioned.new_context and provisioned.context.memberships_url:
        # The first launch into an LMS course brings its whole roster in, in the background.
        ags.request_roster_sync(session, provisioned.context)
    if validated.message_type is MessageType.DEEP_LINKING:
        if provisioned.role is not CourseRole.INSTRUCTOR:
            keep_on_error_response(session)
            return error_page(
                request,
                403,
                "Only instructors choose exercises",
                "Adding loopgrade content to the course is for its instructors.",
            )
        signed = deep_link_request(
            validated, user_id=provisioned.user.id, course_id=provisioned.context.course_id
        ).to_signed(get_secret_key(request))
        target = f"/lti/deep-link?request={quote(signed, safe='')}"
    else:
        assert provisioned.link is not None
        link = provisioned.link
        target = (
            f"/courses/{provisioned.context.course_id}/exercises/{link.exercise_id}"
            if link.exercise_id
            else f"/lti/links/{link.id}"
        )
    ticket = create_ticket(session, provisioned.user, target, lms_origin=provisioned.lms_origin)
    return RedirectResponse(f"/lti/enter?ticket={quote(ticket)}", status_code=303)


@router.get("/lti/enter")
def enter(
    request: Request, session: SessionDep, settings: SettingsDep, ticket: str = ""
) -> Response:
    """Redeem a launch's one-time ticket: a web session, and on to the launch's page."""
    redeemed = redeem_ticket(session, ticket)
    if redeemed is None:
        raise PageError(
            400,
            "This launch link has been used",
            "Each link from the LMS signs in once and for a few minutes only. Open the "
            "activity from the LMS again.",
        )
    user = session.get(User, redeemed.user_id)
    assert user is not None
    if user.disabled_at is not None:
        raise PageError(
            403,
            "This account is disabled",
            "An administrator of this server disabled your account. Ask them to enable it.",
        )
    lms_origin = redeemed.lms_origin or ""
    _, token = start_session(
        session,
        user,
        request,
        max_age_seconds=settings.session_max_age_seconds,
        lms_origin=lms_origin,
    )
    # Ready in case this browser keeps no cookie here: the same page in a new window.
    retry = create_ticket(session, user, redeemed.target_path, lms_origin=lms_origin)
    target = safe_next(redeemed.target_path)
    response = RedirectResponse(
        f"/lti/session-check?next={quote(target, safe='')}&retry={quote(retry)}",
        status_code=303,
    )
    set_framed_session_cookie(response, request, settings, token)
    return response


@router.get("/lti/session-check", response_class=HTMLResponse)
def session_check(
    request: Request, viewer: ViewerDep, next: str = "/", retry: str = ""
) -> Response:
    """Did the browser keep the cookie? Then on to the page; else offer a new window."""
    if viewer.user is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    return render(
        request,
        viewer,
        "lti/no_cookie.html",
        {"new_window_url": f"/lti/enter?ticket={quote(retry)}"},
        status_code=200,
    )


@router.get("/lti/jwks")
@router.get("/.well-known/jwks.json")
def jwks(session: SessionDep, settings: SettingsDep) -> JSONResponse:
    """The tool's public keys: the signing key and recently retired ones."""
    document = tool_jwks(session, key_sealing(settings))
    return JSONResponse(document, headers={"Cache-Control": "max-age=300"})


def tool_configuration(request: Request, settings: Settings) -> dict[str, Any]:
    urls = tool_urls(request, settings)
    placements = [
        {
            "placement": placement,
            "message_type": "LtiDeepLinkingRequest",
            "target_link_uri": urls["launch"],
        }
        for placement in ("link_selection", "assignment_selection")
    ]
    return {
        "title": "loopgrade",
        "description": "Auto-graded exercises for PyTorch training loops.",
        "oidc_initiation_url": urls["login"],
        "target_link_uri": urls["launch"],
        "redirect_uris": [urls["launch"]],
        "public_jwk_url": urls["jwks"],
        "scopes": [*AGS_SCOPES, NRPS_SCOPE],
        "extensions": [
            {
                "platform": "canvas.instructure.com",
                "privacy_level": "public",
                "settings": {"placements": placements},
            }
        ],
        "custom_fields": {},
    }


@router.get("/lti/config")
def config(request: Request, settings: SettingsDep) -> JSONResponse:
    """The tool's configuration as JSON (Canvas: Developer Keys > LTI Key > Paste JSON)."""
    return JSONResponse(tool_configuration(request, settings))


@router.get("/lti/admin", response_class=HTMLResponse)
def admin(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: ViewerDep,
    user: SignedInUserDep,
) -> Response:
    """Everything an operator pastes into an LMS, and what is registered here."""
    if not user.is_admin:
        raise PageError(403, "Not allowed", "Only site admins see the LTI set-up.")
    platforms = [(p, deployments_of(session, p)) for p in list_platforms(session)]
    keys = published_keys(session, key_sealing(settings))
    return render(
        request,
        viewer,
        "lti/admin.html",
        {
            "urls": tool_urls(request, settings),
            "config_json": json.dumps(tool_configuration(request, settings), indent=2),
            "platforms": platforms,
            "keys": keys,
        },
    )


def _link_in_course(
    session: Session, user: User, link_id: str
) -> tuple[LtiResourceLink, str, CourseRole]:
    link = session.get(LtiResourceLink, link_id)
    context = session.get(LtiContext, link.lti_context_id) if link else None
    if link is None or context is None:
        raise PageError(404, "Not found", "There is no such LMS link.")
    _, role = require_member(session, user, context.course_id)
    return link, context.course_id, role


@router.get("/lti/links/{link_id}", response_class=HTMLResponse)
def link_page(
    request: Request, link_id: str, session: SessionDep, viewer: ViewerDep, user: SignedInUserDep
) -> Response:
    """A link that opens no exercise yet: the instructor chooses one, a learner waits."""
    link, course_id, role = _link_in_course(session, user, link_id)
    if link.exercise_id:
        return RedirectResponse(
            f"/courses/{course_id}/exercises/{link.exercise_id}", status_code=303
        )
    return render(
        request,
        viewer,
        "lti/link.html",
        {
            "link": link,
            "is_instructor": role is CourseRole.INSTRUCTOR,
            # The course's own list: an exercise removed from it is not offered.
            "exercises": [a.exercise for a in assignments_of(session, course_id)],
        },
    )


@router.post("/lti/links/{link_id}")
def choose_link_exercise(
    link_id: str,
    session: SessionDep,
    user: SignedInUserFormDep,
    exercise: Annotated[str, Form()] = "",
) -> Response:
    link, course_id, _ = _link_in_course(session, user, link_id)
    require_instructor(session, user, course_id)
    link.exercise_id = _course_exercise(session, course_id, exercise).id
    return RedirectResponse(f"/courses/{course_id}/exercises/{link.exercise_id}", status_code=303)


def _deep_link(request: Request, signed: str, user: User) -> DeepLinkRequest:
    found = DeepLinkRequest.from_signed(get_secret_key(request), signed, user_id=user.id)
    if found is None:
        raise PageError(
            400,
            "Start again from the LMS",
            "This content selection is not valid any more, or was started by someone else.",
        )
    return found


def _course_exercise(session: Session, course_id: str, exercise: str) -> Exercise:
    """The exercise of the course's own list named `exercise`: one removed from the course, or
    never in it, is refused as the chooser never offered it."""
    for assigned in assignments_of(session, course_id):
        if assigned.id == exercise:
            return assigned.exercise
    raise PageError(422, "Unknown exercise", f"The course has no exercise {exercise!r}.")


@router.get("/lti/deep-link", response_class=HTMLResponse)
def deep_link_page(
    request: Request,
    session: SessionDep,
    viewer: ViewerDep,
    signed: Annotated[str, Query(alias="request")] = "",
) -> Response:
    """Content selection: the instructor picks the exercise the new link opens, from the
    exercise list of the course the launch's context maps to."""
    found = _deep_link(request, signed, signed_in_user(viewer))
    return render(
        request,
        viewer,
        "lti/deep_link.html",
        {
            "deep_link": signed,
            "exercises": [a.exercise for a in assignments_of(session, found.course_id)],
        },
    )


@router.post("/lti/deep-link", response_class=HTMLResponse)
def deep_link_answer(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    viewer: CsrfViewerDep,
    deep_link: Annotated[str, Form()] = "",
    exercise: Annotated[str, Form()] = "",
) -> Response:
    """The instructor's choice, answered to the platform with a signed LtiDeepLinkingResponse."""
    found = _deep_link(request, deep_link, signed_in_user(viewer))
    chosen = _course_exercise(session, found.course_id, exercise)
    platform = session.get(LtiPlatform, found.platform_id)
    if platform is None:
        raise PageError(400, "Start again from the LMS", "The platform is no longer registered.")
    token = deep_link_response_jwt(
        session,
        key_sealing(settings),
        found,
        client_id=platform.client_id,
        issuer=platform.issuer,
        exercise=chosen,
        launch_url=tool_url(request, settings, "/lti/launch"),
    )
    return_origin = "{0.scheme}://{0.netloc}".format(urlsplit(found.return_url))
    csp = PAGE_HEADERS["Content-Security-Policy"].replace(
        "form-action 'self'", f"form-action 'self' {return_origin}"
    )
    return render(
        request,
        viewer,
        "lti/deep_link_return.html",
        {"return_url": found.return_url, "jwt": token, "exercise": chosen},
        headers={"Content-Security-Policy": csp},
    )
