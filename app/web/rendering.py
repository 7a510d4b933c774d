"""How pages are rendered: templates and their filters, security headers, error pages.

The pages embed in an LMS iframe, so no X-Frame-Options; scripts and styles are our own files
(no CDN, no inline script), which lets the Content-Security-Policy forbid everything else.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markdown_it import MarkdownIt
from markupsafe import Markup

from app.courses.courses import Forbidden, NotFound
from app.settings import Settings
from app.web.sessions import CsrfRejected, SignInRequired, Viewer, set_cookies

templates = Jinja2Templates(directory=Path(__file__).resolve().parent / "templates")
# Raw HTML in markdown is shown as text: feedback can quote the learner's own code and errors.
_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")

PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors *"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # Pages show one person's code and scores: never kept by a shared cache.
    "Cache-Control": "no-store",
}


def _markdown_filter(text: str | None) -> Markup:
    return Markup(_markdown.render(text or ""))


def _when(value: datetime | None) -> Markup:
    """A time as <time>, in UTC; static/time.js shows it in the reader's own time zone."""
    if value is None:
        return Markup("")
    return Markup('<time datetime="{}" data-local>{}</time>').format(
        value.isoformat(), value.strftime("%Y-%m-%d %H:%M UTC")
    )


def _points(value: float | None) -> str:
    return "\u2014" if value is None else f"{value:g}"


templates.env.filters["markdown"] = _markdown_filter
templates.env.filters["when"] = _when
templates.env.filters["points"] = _points


class PageError(Exception):
    """Stop a page with an error page: a status, a title and a message for the person."""

    def __init__(self, status_code: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.title = title
        self.message = message


def render(
    request: Request,
    viewer: Viewer,
    template: str,
    context: dict[str, Any],
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    response = templates.TemplateResponse(
        request,
        template,
        {"viewer": viewer, "user": viewer.user, "csrf_token": viewer.csrf_token, **context},
        status_code=status_code,
        headers={**PAGE_HEADERS, **(headers or {})},
    )
    settings: Settings = request.app.state.settings
    set_cookies(response, request, settings, viewer)
    return response


def error_page(request: Request, status_code: int, title: str, message: str) -> HTMLResponse:
    # Rendered without a viewer: an error page has no forms but sign-out, which needs none.
    return templates.TemplateResponse(
        request,
        "error.html",
        {"title": title, "message": message, "viewer": None, "user": None, "csrf_token": ""},
        status_code=status_code,
        headers=PAGE_HEADERS,
    )


def install_error_pages(app: FastAPI) -> None:
    """Page errors as pages (the API answers its own errors in JSON)."""

    @app.exception_handler(PageError)
    async def on_page_error(request: Request, exc: PageError) -> Response:
        return error_page(request, exc.status_code, exc.title, exc.message)

    @app.exception_handler(NotFound)
    async def on_not_found(request: Request, exc: NotFound) -> Response:
        return error_page(request, 404, "Not found", str(exc))

    @app.exception_handler(Forbidden)
    async def on_forbidden(request: Request, exc: Forbidden) -> Response:
        return error_page(request, 403, "Not allowed", str(exc))

    @app.exception_handler(CsrfRejected)
    async def on_csrf(request: Request, exc: CsrfRejected) -> Response:
        return error_page(
            request,
            403,
            "Form expired",
            "This form was not sent from this site's page, or the page was open from before "
            "you signed in or out. Go back, reload the page and send it again.",
        )

    @app.exception_handler(SignInRequired)
    async def on_sign_in_required(request: Request, exc: SignInRequired) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/sign-in?next={quote(target, safe='')}", status_code=303)


def safe_next(target: str | None) -> str:
    """Where to go after signing in: only a path on this site (no //host or scheme)."""
    # Browsers drop tabs and newlines from URLs, so "/\t/evil.example" would become "//evil...".
    if any(c.isspace() or ord(c) < 32 for c in target or ""):
        return "/"
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
