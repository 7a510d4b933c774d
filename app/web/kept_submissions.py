"""Code submitted after the session ended is kept, not refused and lost.

A submission whose form's CSRF token is no longer this browser's, but whose Origin says it came
from this site, had a session that ended (or a page open from before signing in or out). Its
code is kept (`app.grading.drafts.keep_submission`), the browser gets a signed cookie for it
and is sent to sign in, then back to the exercise, which opens on that code to submit.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access import (
    CsrfRejected,
    Viewer,
    client_address,
    cookie_is_secure,
    csrf_is_valid,
    get_secret_key,
    had_session,
    same_origin,
    sign,
    unsign,
)
from app.grading.drafts import (
    KEPT_SUBMISSION_SECONDS,
    discard_kept_submission,
    find_kept_submission,
    keep_submission,
)
from app.grading.submissions import SubmissionRejected
from app.models import KeptSubmission
from app.settings import Settings

KEPT_COOKIE = "loopgrade_kept"


def keep_if_session_ended(
    request: Request,
    session: Session,
    settings: Settings,
    viewer: Viewer,
    *,
    csrf_token: str,
    code: str,
) -> Response | None:
    """None when the submission's form is this browser's (CSRF token good, go on); else, when
    it came from this site with code, keep the code and answer a redirect to sign in (or,
    never signed in, back to the page). Anything else is refused as usual (CsrfRejected)."""
    if csrf_is_valid(request, viewer, csrf_token):
        return None
    # Only a browser that says the form is this site's (every current one sends Origin on a
    # POST): code kept from elsewhere would be offered to this browser's learner to submit.
    if request.headers.get("origin") is None or not same_origin(request) or not code.strip():
        raise CsrfRejected()
    page_path = request.url.path
    try:
        token = keep_submission(
            session,
            page_path=page_path,
            code=code.replace("\r\n", "\n"),
            max_code_bytes=settings.max_code_bytes,
            client_address=client_address(request),
        )
    except SubmissionRejected:
        raise CsrfRejected() from None
    if had_session(request) or viewer.user is not None:
        target = f"/sign-in?ended=1&next={quote(page_path, safe='')}"
    else:
        target = page_path
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        KEPT_COOKIE,
        sign(get_secret_key(request), "kept-submission", token),
        max_age=KEPT_SUBMISSION_SECONDS,
        httponly=True,
        # Lax: the redirect chain back from signing in is a top-level navigation.
        samesite="lax",
        secure=cookie_is_secure(request, settings),
    )
    return response


def kept_submission_of(request: Request, session: Session) -> KeptSubmission | None:
    """The code this browser sent to this page while its session had ended, if any."""
    token = unsign(get_secret_key(request), "kept-submission", request.cookies.get(KEPT_COOKIE))
    if token is None:
        return None
    return find_kept_submission(session, token=token, page_path=request.url.path)


def forget_kept_submission(request: Request, session: Session, response: Response) -> None:
    """The kept code was submitted: drop it and its cookie."""
    token = unsign(get_secret_key(request), "kept-submission", request.cookies.get(KEPT_COOKIE))
    if token is None:
        return
    discard_kept_submission(session, token=token)
    response.delete_cookie(KEPT_COOKIE, httponly=True, samesite="lax")
