"""How pages are rendered: templates and their filters, security headers, error pages.

The pages embed in an LMS iframe, so no X-Frame-Options; scripts and styles are our own files
(no CDN, no inline script), which lets the Content-Security-Policy forbid everything else.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markupsafe import Markup

from app.access import SignInRequired, Viewer, browser_name, set_cookies
from app.courses.counted import span_words
from app.courses.membership import in_units
from app.errors import AppError
from app.settings import Settings
from graders.hints import ANCHOR_PREFIX
from graders.report import diagnosis_name

templates = Jinja2Templates(directory=Path(__file__).resolve().parent / "web" / "templates")
# Exercise prompts, written by the course's authors. Raw HTML is shown as text even there.
_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")


def _heading_anchors(state: StateCore) -> None:
    """`## Title {#anchor}` in a prompt: the heading gets the id `lesson-anchor`, which a hint's
    lesson link points at (graders/hints.py); the braces are not shown."""
    for heading, inline in itertools.pairwise(state.tokens):
        if heading.type != "heading_open" or not inline.children:
            continue
        last = inline.children[-1]
        found = _ANCHOR_SUFFIX.search(last.content) if last.type == "text" else None
        if found:
            last.content = last.content[: found.start()]
            heading.attrSet("id", ANCHOR_PREFIX + found.group(1))


_ANCHOR_SUFFIX = re.compile(r"\s*\{#([a-z0-9][a-z0-9-]*)\}\s*$")
_markdown.core.ruler.push("heading_anchors", _heading_anchors)
# A grade's feedback quotes the learner's code and errors, which the grader escapes. In case a
# quote ever slips through, feedback is rendered with only what the grader's own text uses:
# paragraphs, lists, code and emphasis. No link, image, heading, quote block or table, so no
# learner text can become a link to another site or a panel that looks like the server's.
_feedback_markdown = MarkdownIt("zero", {"html": False}).enable(
    ["paragraph", "list", "code", "fence", "newline", "escape", "backticks", "emphasis", "entity"]
)

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


def _feedback_filter(text: str | None) -> Markup:
    # A quoted traceback scrolls sideways: keyboard users reach it (tabindex). Safe to replace:
    # with html off, a "<pre>" in the learner's text is rendered escaped, never as a tag.
    html = _feedback_markdown.render(text or "")
    return Markup(html.replace("<pre>", '<pre tabindex="0">'))


def _when(value: datetime | None) -> Markup:
    """A time as <time>, in UTC; static/time.js shows it in the reader's own time zone."""
    if value is None:
        return Markup("")
    return Markup('<time datetime="{}" data-local>{}</time>').format(
        value.isoformat(), value.strftime("%Y-%m-%d %H:%M UTC")
    )


def countdown_words(seconds: float) -> str:
    """How long until (or since) a moment, in words: "in 2 days, 3 hours", "5 minutes ago".

    static/time.js says the same in the reader's browser and keeps it current.
    """
    span = span_words(seconds)
    return f"in {span}" if seconds >= 0 else f"{span} ago"


def _countdown(value: datetime | None, now: datetime) -> Markup:
    """The time left until `value` as of `now`, as a <time> that static/time.js keeps current."""
    if value is None:
        return Markup("")
    return Markup('<time datetime="{}" data-countdown>{}</time>').format(
        value.isoformat(), countdown_words((value - now).total_seconds())
    )


def _points(value: float | None) -> str:
    return "\u2014" if value is None else f"{value:g}"


def _by_unit(rows: Iterable[tuple[Any, Any]]) -> list[tuple[str, list[tuple[Any, Any]]]]:
    """(exercise or assigned exercise, its state) pairs grouped by unit: the pages' headings."""
    return in_units(rows, lambda row: str(row[0].unit))


templates.env.filters["by_unit"] = _by_unit
templates.env.filters["markdown"] = _markdown_filter
templates.env.filters["feedback"] = _feedback_filter
templates.env.filters["when"] = _when
templates.env.filters["points"] = _points
templates.env.filters["countdown"] = _countdown
templates.env.filters["diagnosis_name"] = diagnosis_name
templates.env.filters["browser_name"] = browser_name


class PageError(AppError):
    """Stop a page with an error page: a status, a title and a message for the person."""

    def __init__(self, status_code: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.title = title


def render(
    request: Request,
    viewer: Viewer,
    template: str,
    context: dict[str, Any],
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    # The code editor (CodeMirror) adds <style> elements: each page allows only its own.
    style_nonce = secrets.token_urlsafe(16)
    policy = f"{PAGE_HEADERS['Content-Security-Policy']}; style-src 'self' 'nonce-{style_nonce}'"
    response = templates.TemplateResponse(
        request,
        template,
        {
            "viewer": viewer,
            "user": viewer.user,
            "csrf_token": viewer.csrf_token,
            "style_nonce": style_nonce,
            "lms_origin": viewer.web_session.lms_origin if viewer.web_session else None,
            **context,
        },
        status_code=status_code,
        headers={**PAGE_HEADERS, "Content-Security-Policy": policy, **(headers or {})},
    )
    settings: Settings = request.app.state.settings
    set_cookies(response, request, settings, viewer)
    return response


def csv_download(text: str, filename: str) -> Response:
    """A CSV file to save: never cached, never sniffed as anything else."""
    return Response(
        text,
        media_type="text/csv; charset=utf-8",
        headers={
            "Content-Disposition": f'attachment; filename="{filename}"',
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )


def file_slug(name: str, fallback: str) -> str:
    """A name as a file name's part: letters and digits, the rest as dashes."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or fallback


def error_page(
    request: Request,
    status_code: int,
    title: str,
    message: str,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    # Rendered without a viewer: an error page has no forms but sign-out, which needs none.
    return templates.TemplateResponse(
        request,
        "error.html",
        {"title": title, "message": message, "viewer": None, "user": None, "csrf_token": ""},
        status_code=status_code,
        headers={**PAGE_HEADERS, **(headers or {})},
    )


def install_sign_in_redirect(app: FastAPI) -> None:
    """A page that needs a signed-in user sends the browser to sign in, then back."""

    @app.exception_handler(SignInRequired)
    async def on_sign_in_required(request: Request, exc: SignInRequired) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/sign-in?next={quote(target, safe='')}", status_code=303)
