"""The exercise page's editor in Chromium: CodeMirror typing (brackets, indentation, search,
leaving by keyboard), the textarea without JavaScript, drafts that survive reloads, Back and a
fresh browser and are forgotten by the browser at sign-out, reset to starter, the warning before
leaving unsaved code, code kept across an ended session, a phone's 16 px text and the dark
theme. Screenshots land in build/screenshots."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Dialog, Page, ViewportSize, expect
from sqlalchemy import select, update

from app.db import SessionFactory
from app.models import Submission, WebSession, utc_now
from tests.app.conftest import EXERCISE, REPO
from tests.app.people import PASSWORD, make_course, make_user
from tests.browser.conftest import assert_accessible_basics, assert_no_axe_violations, screenshot

STARTER = (REPO / "exercises" / EXERCISE / "starter.py").read_text()
PAGE = f"/exercises/{EXERCISE}"
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}


@pytest.fixture
def contexts(browser: Browser, base_url: str) -> Iterator[Any]:
    """Open browser contexts (fresh browsers) as the test asks; all closed after it."""
    opened: list[BrowserContext] = []

    def open_context(*, phone: bool = False, **options: Any) -> Page:
        context = browser.new_context(
            base_url=base_url,
            viewport=PHONE if phone else DESKTOP,
            is_mobile=phone,
            has_touch=phone,
            **options,
        )
        context.set_default_timeout(15_000)
        opened.append(context)
        return context.new_page()

    yield open_context
    for context in opened:
        context.close()


def editor_value(page: Page) -> str:
    value: str = page.evaluate("window.loopgradeEditor.getValue()")
    return value


def open_exercise(page: Page, path: str = PAGE) -> None:
    page.goto(path)
    page.wait_for_function("window.loopgradeEditor !== undefined")


def type_at_end(page: Page, text: str) -> None:
    page.locator(".cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(text)


def type_until_saved_on_the_server(page: Page, text: str) -> str:
    """Type `text` at the end, wait until the server saved the practice draft; the editor's text."""
    with page.expect_response(
        lambda r: r.request.method == "PUT" and "/drafts/practice/" in r.url
    ) as saved:
        type_at_end(page, text)
    assert saved.value.status == 200
    return editor_value(page)


def editor_screenshot(page: Page, name: str) -> None:
    """A screenshot once the editor was seen: CodeMirror measures its lines (and sizes the line
    numbers to them) only when they come into view, which a full-page screenshot skips."""
    page.locator(".cm-editor").scroll_into_view_if_needed()
    page.wait_for_function(
        """() => {
          const number = document.querySelectorAll('.cm-lineNumbers .cm-gutterElement')[1];
          const line = document.querySelector('.cm-line');
          return Math.abs(number.offsetHeight - line.offsetHeight) < 1;
        }"""
    )
    screenshot(page, name)


def sign_in(page: Page, email: str, next_path: str = PAGE) -> None:
    page.goto(f"/sign-in?next={next_path}")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(re.escape(next_path) + "$"))


def test_typing_in_the_editor(contexts: Any) -> None:
    page = contexts()
    open_exercise(page)
    assert editor_value(page) == STARTER
    # The textarea is hidden but still the form's field, equal to the editor's text.
    expect(page.locator("textarea#code")).to_be_hidden()
    content = page.get_by_role("textbox", name=re.compile("^Your code"))
    expect(content).to_have_attribute("aria-describedby", re.compile("editor-help"))

    type_at_end(page, "\nfor i in range(3):\nprint(i")
    # Auto-indent after the colon; the bracket closed itself and matches.
    assert editor_value(page).endswith("\nfor i in range(3):\n    print(i)")
    expect(page.locator(".cm-matchingBracket")).to_have_count(2)
    assert page.locator("textarea#code").input_value() == editor_value(page)
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    assert editor_value(page).endswith("    print(i)\n    ")

    # Search opens with the keyboard, in a panel above the code.
    page.keyboard.press("Control+f")
    search = page.locator(".cm-search input[name=search]")
    expect(search).to_be_focused()
    search.press_sequentially("range")
    expect(page.locator(".cm-searchMatch")).to_have_count(1)
    page.keyboard.press("Escape")
    expect(page.locator(".cm-search")).to_have_count(0)
    expect(content).to_be_focused()

    # Tab indents inside; Esc then Tab leaves to the next control. The way out is shown beside
    # Submit, just under the editor, while the editor has the focus, and only then.
    way_out = page.locator("#editor-way-out")
    expect(way_out).to_be_visible()
    expect(way_out).to_have_text("Tab indents here. To leave the editor, press Esc, then Tab.")
    submit = page.get_by_role("button", name="Submit for grading")
    hint_box, submit_box = way_out.bounding_box(), submit.bounding_box()
    assert hint_box and submit_box and abs(hint_box["y"] - submit_box["y"]) < submit_box["height"]
    before = editor_value(page)
    page.keyboard.press("Tab")
    assert editor_value(page) != before
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    expect(content).not_to_be_focused()
    # The next control after the editor is the form's Submit button.
    expect(submit).to_be_focused()
    expect(way_out).to_be_hidden()
    page.keyboard.press("Shift+Tab")
    expect(content).to_be_focused()
    expect(way_out).to_be_visible()

    # Marks for the page's result script: a line, a gutter marker, words for screen readers.
    page.evaluate("window.loopgradeEditor.markLine(2, 'The docstring is fine')")
    expect(page.locator(".cm-marked-line")).to_have_count(1)
    expect(page.locator(".cm-mark-marker")).to_have_attribute("title", "The docstring is fine")
    expect(page.locator("#code-marks")).to_have_text("Line 2: The docstring is fine")
    # The editor's description, read when the learner is in it; no live region (the page says
    # what happened, once).
    expect(content).to_have_attribute("aria-describedby", re.compile(r"\bcode-marks\b"))
    assert page.locator("#code-marks").get_attribute("aria-live") is None
    assert page.locator("#code-marks").get_attribute("role") is None
    assert_accessible_basics(page)
    editor_screenshot(page, "editor-desktop")
    page.evaluate("window.loopgradeEditor.clearMarks()")
    expect(page.locator(".cm-marked-line")).to_have_count(0)
    expect(page.locator("#code-marks")).to_have_text("")


def test_without_javascript_the_textarea_posts_the_form(contexts: Any) -> None:
    page = contexts(java_script_enabled=False)
    page.goto(PAGE)
    textarea = page.get_by_label(re.compile("^Your code"))
    expect(textarea).to_be_visible()
    expect(page.locator(".cm-editor")).to_have_count(0)
    assert textarea.input_value() == STARTER
    textarea.fill(STARTER + "# without javascript\n")
    page.get_by_role("button", name="Submit for grading").click()
    page.wait_for_url(re.compile(r"/submissions/[0-9a-f-]{36}$"))
    expect(page.locator("pre, code").filter(has_text="# without javascript")).not_to_have_count(0)

    # axe needs JavaScript (and its timers) to run: the same page with only the editor's
    # script kept out stands for the page without JavaScript.
    fallback = contexts()
    fallback.route("**/static/editor.js", lambda route: route.abort())
    fallback.goto(PAGE)
    expect(fallback.get_by_label(re.compile("^Your code"))).to_be_visible()
    assert_accessible_basics(fallback)
    screenshot(fallback, "editor-without-javascript")


def test_a_draft_survives_reload_and_back(contexts: Any) -> None:
    page = contexts()
    open_exercise(page)
    type_at_end(page, "# kept in this browser\n")
    typed = editor_value(page)
    page.reload()
    page.wait_for_function("window.loopgradeEditor !== undefined")
    assert editor_value(page) == typed
    expect(page.get_by_role("status").filter(has_text="back in the editor")).to_be_visible()

    page.goto("/")
    page.go_back()
    page.wait_for_function("window.loopgradeEditor !== undefined")
    assert editor_value(page) == typed
    assert_no_axe_violations(page)


def test_the_server_draft_follows_the_learner_to_a_fresh_browser(
    contexts: Any, module_sessions: SessionFactory
) -> None:
    make_user(module_sessions, "dana@example.org")
    first = contexts()
    sign_in(first, "dana@example.org")
    open_exercise(first)
    typed = type_until_saved_on_the_server(first, "# on the server\n")

    second = contexts()
    sign_in(second, "dana@example.org")
    open_exercise(second)
    assert editor_value(second) == typed
    # Nothing unsaved: leaving asks nothing.
    dialogs: list[str] = []
    first.on("dialog", lambda dialog: dialogs.append(dialog.type))
    with first.expect_event("close"):
        first.close(run_before_unload=True)
    assert dialogs == []


def drafts_kept(page: Page) -> list[str]:
    """The drafts this browser keeps (their localStorage keys), sorted."""
    keys: list[str] = page.evaluate("Object.keys(localStorage)")
    return sorted(key for key in keys if key.startswith("loopgrade:draft:"))


def test_signing_out_forgets_the_learners_drafts_in_this_browser(
    contexts: Any, module_sessions: SessionFactory
) -> None:
    make_user(module_sessions, "gus@example.org")
    page = contexts()
    # Typed signed out: a draft of no account, which stays.
    open_exercise(page)
    type_at_end(page, "# typed signed out\n")
    typed_signed_out = editor_value(page)
    sign_in(page, "gus@example.org")
    open_exercise(page)
    typed_signed_in = type_until_saved_on_the_server(page, "# typed signed in\n")
    anonymous = f"loopgrade:draft:anon:practice:{EXERCISE}"
    kept = drafts_kept(page)
    assert len(kept) == 2 and anonymous in kept, kept

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/$"))  # loaded: its deferred scripts have run
    assert drafts_kept(page) == [anonymous]
    assert "loopgrade_forget_drafts" not in page.evaluate("document.cookie")
    open_exercise(page)
    assert editor_value(page) == typed_signed_out
    # Nothing confirmed is lost: signed in again, the exercise opens on the server's draft.
    sign_in(page, "gus@example.org")
    open_exercise(page)
    assert editor_value(page) == typed_signed_in


def test_reset_to_starter_asks_first(contexts: Any) -> None:
    page = contexts()
    open_exercise(page)
    type_at_end(page, "# to be reset\n")
    typed = editor_value(page)
    reset = page.get_by_role("button", name="Reset to starter")

    page.once("dialog", lambda dialog: dialog.dismiss())
    reset.click()
    assert editor_value(page) == typed

    page.once("dialog", lambda dialog: dialog.accept())
    reset.click()
    assert editor_value(page) == STARTER
    # Undo brings the learner's code back.
    page.keyboard.press("Control+z")
    assert editor_value(page) == typed


def test_leaving_with_unsaved_changes_asks_first(
    contexts: Any, module_sessions: SessionFactory
) -> None:
    make_user(module_sessions, "eli@example.org")
    page = contexts()
    sign_in(page, "eli@example.org")
    open_exercise(page)
    # The server cannot be reached: the change is not saved there.
    page.route("**/drafts/**", lambda route: route.abort())
    type_at_end(page, "# not saved yet\n")
    dialogs: list[str] = []

    def stay(dialog: Dialog) -> None:
        dialogs.append(dialog.type)
        dialog.dismiss()

    page.on("dialog", stay)
    page.close(run_before_unload=True)
    expect(page.locator(".cm-editor")).to_be_visible()
    assert dialogs == ["beforeunload"]
    assert not page.is_closed()


def test_code_submitted_after_the_session_ended_is_kept_and_submitted_after_sign_in(
    contexts: Any, module_sessions: SessionFactory
) -> None:
    make_user(module_sessions, "tess@example.org")
    make_user(module_sessions, "fay@example.org")
    course_id = make_course(module_sessions, "tess@example.org", "fay@example.org")
    path = f"/courses/{course_id}/exercises/{EXERCISE}"
    page = contexts()
    sign_in(page, "fay@example.org", path)
    open_exercise(page, path)
    type_at_end(page, "# sent after the session ended\n")
    typed = editor_value(page)
    with module_sessions.begin() as session:
        session.execute(update(WebSession).values(expires_at=utc_now()))

    page.get_by_role("button", name="Submit for grading").click()
    page.wait_for_url(re.compile(r"/sign-in\?ended=1"))
    expect(page.locator("#kept-notice")).to_contain_text("It is kept")
    assert_accessible_basics(page)
    screenshot(page, "editor-session-ended-sign-in")
    page.get_by_label("Email").fill("fay@example.org")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    page.wait_for_url(re.compile(re.escape(path) + "$"))
    page.wait_for_function("window.loopgradeEditor !== undefined")
    assert editor_value(page) == typed
    notice = page.locator("#kept-notice")
    expect(notice).to_contain_text("this code was not submitted")
    assert_accessible_basics(page)
    editor_screenshot(page, "editor-session-ended-kept")
    # One click submits it (in place, by the page's script), and the notice goes.
    with page.expect_response(
        lambda r: r.request.method == "POST" and r.url.endswith(path)
    ) as sent:
        notice.get_by_role("button", name="Submit it now").click()
    assert sent.value.status == 202
    expect(notice).to_be_hidden()
    with module_sessions() as session:
        codes = session.scalars(select(Submission.code)).all()
    assert typed in codes


def test_a_phone_gets_16px_text(contexts: Any) -> None:
    page = contexts(phone=True)
    open_exercise(page)
    size = page.evaluate(
        "parseFloat(getComputedStyle(document.querySelector('.cm-content')).fontSize)"
    )
    assert size >= 16
    page.locator(".cm-content").tap()
    page.keyboard.press("Control+f")
    search_size = page.evaluate(
        "parseFloat(getComputedStyle(document.querySelector('.cm-search input')).fontSize)"
    )
    assert search_size >= 16
    assert_accessible_basics(page)
    editor_screenshot(page, "editor-phone")


def test_the_editor_follows_a_dark_system_theme(contexts: Any) -> None:
    def background(page: Page) -> list[int]:
        color: str = page.evaluate(
            "getComputedStyle(document.querySelector('.cm-editor')).backgroundColor"
        )
        return [int(part) for part in re.findall(r"\d+", color)[:3]]

    light = contexts(color_scheme="light")
    open_exercise(light)
    assert min(background(light)) > 200
    dark = contexts(color_scheme="dark")
    open_exercise(dark)
    assert max(background(dark)) < 60
    type_at_end(dark, "\nif True:\n'text'  # comment")
    assert_no_axe_violations(dark)
    editor_screenshot(dark, "editor-dark")
