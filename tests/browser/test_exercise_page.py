"""The learner's loop on one exercise page, in Chromium: desktop, phone, and inside a frame.

The server has a broker URL that leads nowhere, so none of its threads grades: the test grades
each submission when it chooses, with the server's own `run_grading_job` in the server's
process (it runs in a thread here) and its progress streams told, as its grading threads do.
So the page is seen queued, then running, then graded, without depending on timing. Two real
gradings in all (cold sandboxes): each costs CPU on a shared machine.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi import FastAPI
from playwright.sync_api import Browser, Frame, Page, ViewportSize, expect
from sqlalchemy import func, select

from app.db import SessionFactory
from app.grading.queue import run_grading_job
from app.lti.models import LtiPlatform
from app.main import create_app
from app.models import Submission, SubmissionStatus
from app.settings import Settings
from graders.exercises import list_exercises
from tests.app.conftest import CORRECT_CODE
from tests.browser.conftest import (
    announcements,
    assert_no_axe_violations,
    record_announcements,
    screenshot,
)
from tests.conftest import ScopeDatabase
from tests.servers import app_in_thread

EXERCISE_PATH = "/exercises/train-step"
DESKTOP_800: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}
GRADING_MS = 180_000
# Raises on line 6, after a correct step: graded runtime-error, line 6 marked.
RAISES_ON_LINE_6 = """\
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item() / undefined_scale
"""
SYNTAX_ERROR_ON_LINE_2 = "def train_step(model, optimizer, loss_fn, x, y):\n    loss = (1 +\n"
NOWHERE_BROKER = "redis://127.0.0.1:1/0"


class FramingPage(BaseHTTPRequestHandler):
    """A page of another origin (an LMS, say) with the exercise in an iframe."""

    exercise_url = ""

    def do_GET(self) -> None:
        body = (
            '<!doctype html><html lang="en"><head><title>Course site</title></head><body>'
            "<main><h1>Week 3</h1>"
            f'<iframe id="tool" title="Exercise" src="{self.exercise_url}" width="1000" '
            'height="760"></iframe></main>'
            # As an LMS does: the frame takes the height the tool asks for (lti.frameResize).
            "<script>window.frameResizes = [];"
            'window.addEventListener("message", (event) => {'
            '  if (!event.data || event.data.subject !== "lti.frameResize") return;'
            "  window.frameResizes.push(event.data.height);"
            '  document.getElementById("tool").style.height = event.data.height + "px";'
            "});</script></body></html>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def framing_host() -> Iterator[ThreadingHTTPServer]:
    """The framing page's server, its port bound for the module (the app's settings name its
    origin before a test opens it)."""
    host = ThreadingHTTPServer(("127.0.0.1", 0), FramingPage)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    yield host
    host.shutdown()
    host.server_close()


@pytest.fixture(scope="module")
def framing_origin(framing_host: ThreadingHTTPServer) -> str:
    # Another origin on loopback: another port of 127.0.0.1 (the same site, so the page's
    # Lax cookies go with its requests, as they do on an LMS that shares the school's site).
    return f"http://127.0.0.1:{framing_host.server_address[1]}"


@pytest.fixture(scope="module")
def server_settings(
    tmp_path_factory: pytest.TempPathFactory, scope_database: ScopeDatabase
) -> Iterator[Settings]:
    data_dir = tmp_path_factory.mktemp("exercise-page") / "data"
    with scope_database(data_dir) as database_url:
        yield Settings(
            data_dir=data_dir,
            database_url=database_url,
            broker_url=NOWHERE_BROKER,
            sandbox_pool_size=0,
        )


@pytest.fixture(scope="module")
def served_app(
    server_settings: Settings, module_sessions: SessionFactory, framing_origin: str
) -> FastAPI:
    # A registered platform that frames from `framing_origin` (frame-ancestors lets it).
    with module_sessions.begin() as session:
        session.add(
            LtiPlatform(
                issuer="https://lms.example.edu",
                client_id="tool",
                auth_url="https://lms.example.edu/auth",
                token_url="https://lms.example.edu/token",
                jwks_url="https://lms.example.edu/jwks",
                frame_origins=[framing_origin],
            )
        )
    return create_app(server_settings)


@pytest.fixture(scope="module")
def base_url(served_app: FastAPI) -> Iterator[str]:
    with app_in_thread(served_app) as url:
        yield url


def open_page(
    browser: Browser, base_url: str, viewport: ViewportSize, *, phone: bool = False
) -> Page:
    context = browser.new_context(
        base_url=base_url, viewport=viewport, is_mobile=phone, has_touch=phone
    )
    context.set_default_timeout(15_000)
    return context.new_page()


def write_code(view: Page | Frame, code: str) -> None:
    """Replace the editor's code and put the focus in it, as a learner would."""
    view.wait_for_function("() => window.loopgradeEditor")
    view.evaluate("code => window.loopgradeEditor.setValue(code)", code)
    view.evaluate("() => window.loopgradeEditor.focus()")


def code_in_editor(view: Page | Frame) -> str:
    code: str = view.evaluate("() => window.loopgradeEditor.getValue()")
    return code


def submission_count(sessions: SessionFactory) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Submission)) or 0


def queued_id(sessions: SessionFactory) -> str:
    with sessions() as session:
        return session.execute(
            select(Submission.id).where(Submission.status == SubmissionStatus.QUEUED)
        ).scalar_one()


def grade_while_watching(
    app: FastAPI, settings: Settings, view: Page | Frame, submission_id: str
) -> None:
    """Grade as the server's threads do; stop after the claim until the page says "running"."""
    claimed, go_on = threading.Event(), threading.Event()

    def on_state_change(changed_id: str, status: SubmissionStatus) -> None:
        app.state.progress_streams.state_changed(changed_id, status)
        if not claimed.is_set():
            claimed.set()
            go_on.wait(GRADING_MS / 1000)

    grading = threading.Thread(
        target=run_grading_job,
        args=(app.state.sessions, submission_id, settings),
        kwargs={"on_state_change": on_state_change},
    )
    grading.start()
    try:
        assert claimed.wait(GRADING_MS / 1000)
        status = view.locator("#live-result .status")
        expect(status).to_contain_text("Grading: running your code")
        expect(status.locator(".elapsed")).to_have_text(re.compile(r"^\d+ s$"))
    finally:
        go_on.set()
        grading.join()


def test_desktop_one_page_loop(
    browser: Browser,
    base_url: str,
    served_app: FastAPI,
    server_settings: Settings,
    module_sessions: SessionFactory,
) -> None:
    page = open_page(browser, base_url, DESKTOP_800)
    page.goto(EXERCISE_PATH)
    assert_no_axe_violations(page)

    # The prompt beside the editor, both and Submit above the fold.
    prompt = page.locator(".exercise-prompt .prompt").bounding_box()
    editor_box = page.locator(".exercise-work .submit-form").bounding_box()
    submit = page.get_by_role("button", name="Submit for grading").bounding_box()
    assert prompt and editor_box and submit
    assert prompt["x"] + prompt["width"] <= editor_box["x"], (prompt, editor_box)
    assert prompt["y"] < DESKTOP_800["height"] and editor_box["y"] < DESKTOP_800["height"] / 3
    assert submit["y"] + submit["height"] <= DESKTOP_800["height"], submit
    screenshot(page, "exercise-desktop-800")

    # A syntax error: said at once with its line, the line marked, nothing stored.
    write_code(page, SYNTAX_ERROR_ON_LINE_2)
    # From the keyboard: Tab to Submit, Enter. The message takes the focus (not <body>) and is
    # said once, as focused: no live region says it or the marked line (no alert beside it;
    # the editor's marks are its description, read when the learner goes into the editor).
    record_announcements(page)
    page.get_by_role("button", name="Submit for grading").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#form-error")).to_contain_text("Syntax error on line 2")
    expect(page.locator("#form-error")).to_be_focused()
    assert page.locator("#form-error").get_attribute("role") is None
    expect(page.locator("form.submit-form")).to_have_attribute("data-marked-line", "2")
    expect(page.locator(".cm-marked-line")).to_have_count(1)
    expect(page.locator(".cm-marked-line")).to_contain_text("loss = (1 +")
    expect(page.locator("#code-marks")).to_have_text(re.compile(r"^Line 2: "))
    content = page.locator(".cm-content")
    expect(content).to_have_attribute("aria-describedby", re.compile(r"\bcode-marks\b"))
    assert announcements(page) == ["result-announcement: Sending your code…"]
    assert submission_count(module_sessions) == 0
    assert_no_axe_violations(page)

    # Ctrl+Enter submits in the background: queued, running with its seconds, then the
    # result in place, the code still in the editor, the page never left.
    this_exercise = page.locator("#unit-strip li.current .state")
    expect(this_exercise).to_have_text("○ Not started")
    page.evaluate("window.stayedOnThePage = true")
    write_code(page, RAISES_ON_LINE_6)
    page.keyboard.press("Control+Enter")
    expect(page.locator("#form-error")).to_be_hidden()
    expect(page.locator("#live-result .status")).to_contain_text("Queued: next in line")
    # The page's live region says the state; the panel itself is no live region.
    announcement = page.locator("#result-announcement")
    expect(announcement).to_have_text("Queued: next in line for a grader…")
    assert page.locator("#live-result[aria-live]").count() == 0
    submission_id = queued_id(module_sessions)
    # Its own page, open meanwhile in another tab, follows the same stream.
    own_page = page.context.new_page()
    own_page.goto(f"/submissions/{submission_id}")
    expect(own_page.locator("#result .status")).to_contain_text("Queued: next in line")
    own_announcement = own_page.locator("#result-announcement")
    expect(own_announcement).to_have_text("Queued: next in line for a grader…")
    grade_while_watching(served_app, server_settings, page, submission_id)
    result = page.locator("#live-result #result")
    expect(result.locator(".score-value")).to_be_visible(timeout=GRADING_MS)
    expect(own_page.locator("#result .score-value")).to_have_text("0 / 10")
    expect(own_page.locator("#result .diagnosis")).to_have_text("Error while running")
    # Its live region, as the exercise page's, says the headline only, not the whole result
    # (the failed checks' table, the error's trace), which is no live region.
    expect(own_announcement).to_have_text("Result: 0 / 10 Error while running")
    expect(own_page.locator("#result tr.failed").first).to_be_visible()
    assert own_page.locator("#result[aria-live], #result [aria-live]").count() == 0
    assert_no_axe_violations(own_page)
    own_page.close()
    # The diagnosis in words; the failed run said once, in the feedback (the check points
    # there), its code spans as code.
    expect(result.locator(".diagnosis")).to_have_text("Error while running")
    expect(result.locator("tr.failed .message").first).to_contain_text("The run did not finish")
    expect(result.locator(".feedback code").first).to_be_visible()
    expect(page.locator("form.submit-form")).to_have_attribute("data-marked-line", "6")
    expect(page.locator(".cm-marked-line")).to_contain_text("undefined_scale")
    assert code_in_editor(page) == RAISES_ON_LINE_6
    assert_result_headline(page, "0 / 10 Error while running")
    # The failing line is described in the editor, not said a second time beside the headline.
    expect(page.locator("#code-marks")).to_have_text("Line 6: Your code failed on this line")
    # Since Enter on the syntax error, only the page's own live region has spoken.
    said = announcements(page)
    assert all(words.startswith("result-announcement: ") for words in said), said
    assert not [words for words in said if "this line" in words or "Line " in words], said
    # The strip says the new state without a reload; nothing to go on to yet.
    expect(this_exercise).to_have_text("◐ Tried")
    expect(page.locator("#next-exercise a")).to_have_count(0)
    assert page.evaluate("window.stayedOnThePage") is True
    assert page.url.endswith(EXERCISE_PATH)
    assert_no_axe_violations(page)
    screenshot(page, "exercise-desktop-result-in-place")

    # Its own page shows the code with line numbers and line 6 marked.
    page.get_by_role("link", name="This result on its own page").click()
    expect(page).to_have_url(re.compile(f"/submissions/{submission_id}$"))
    marked = page.locator(".numbered-code .marked-line")
    expect(marked).to_have_count(1)
    expect(marked).to_have_attribute("id", "line-6")
    expect(marked).to_contain_text("undefined_scale")
    assert_no_axe_violations(page)
    screenshot(page, "submission-desktop-marked-line")

    # Solved: the strip says so and the next exercise is one click away, still in place.
    page.goto(EXERCISE_PATH)
    expect(this_exercise).to_have_text("◐ Tried")
    page.evaluate("window.stayedOnThePage = true")
    write_code(page, CORRECT_CODE)
    page.keyboard.press("Control+Enter")
    expect(page.locator("#live-result .status")).to_contain_text("Queued")
    grade_while_watching(served_app, server_settings, page, queued_id(module_sessions))
    expect(result.locator(".score-value")).to_have_text("10 / 10", timeout=GRADING_MS)
    assert_result_headline(page, "10 / 10 Correct")
    expect(this_exercise).to_have_text("✓ Solved")
    following = list_exercises()[[e.id for e in list_exercises()].index("train-step") + 1]
    next_link = page.get_by_role("link", name=f"Next exercise: {following.title}")
    expect(next_link).to_have_attribute("href", f"/exercises/{following.id}")
    assert page.evaluate("window.stayedOnThePage") is True
    assert_no_axe_violations(page)
    screenshot(page, "exercise-desktop-solved-in-place")
    page.context.close()


def assert_result_headline(page: Page, words: str) -> None:
    """After Submit: the result's headline (score and diagnosis) is a heading that has the
    focus, in sight on the 800 px screen; the live region says it, and only it."""
    headline = page.locator("#live-result #result-headline")
    expect(headline).to_be_focused()
    expect(headline).to_have_attribute("role", "heading")
    expect(headline).to_have_attribute("tabindex", "-1")
    expect(headline).to_be_in_viewport()
    expect(page.locator("#result-announcement")).to_have_text(f"Result: {words}")
    # The result's own section, once a live region of its own, is no longer one.
    assert page.locator("#live-result [aria-live]").count() == 0


def test_phone_title_and_editor_come_first(browser: Browser, base_url: str) -> None:
    page = open_page(browser, base_url, PHONE, phone=True)
    page.goto(EXERCISE_PATH)
    title = page.get_by_role("heading", level=1).bounding_box()
    assert title and title["y"] + title["height"] <= PHONE["height"] / 2, title
    # The editor is one link away, in the first screen, past the prompt.
    to_editor = page.get_by_role("link", name="Go to the editor")
    box = to_editor.bounding_box()
    assert box and box["y"] + box["height"] <= PHONE["height"], box
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert_no_axe_violations(page)
    screenshot(page, "exercise-phone")
    to_editor.click()
    expect(page.locator(".cm-editor")).to_be_in_viewport()
    # In the editor, the way out of it shows under it, the page no wider for it.
    way_out = page.locator("#editor-way-out")
    expect(way_out).to_be_hidden()
    page.locator(".cm-content").tap()
    expect(way_out).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.context.close()


def test_framed_by_another_origin_the_loop_works_inside_the_frame(
    browser: Browser,
    base_url: str,
    served_app: FastAPI,
    server_settings: Settings,
    module_sessions: SessionFactory,
    framing_origin: str,
) -> None:
    FramingPage.exercise_url = base_url + EXERCISE_PATH
    page = open_page(browser, framing_origin, {"width": 1100, "height": 900})
    page.goto("/")
    page.wait_for_selector("#tool")
    frame = page.frame_locator("#tool")
    expect(frame.get_by_role("button", name="Submit for grading")).to_be_visible()
    inner = next(f for f in page.frames if f.url.startswith(base_url))
    assert_no_axe_violations(inner)

    before = submission_count(module_sessions)
    write_code(inner, RAISES_ON_LINE_6.replace("undefined_scale", "missing_name"))
    page.keyboard.press("Meta+Enter")  # Cmd+Enter, as on a Mac
    expect(frame.locator("#live-result .status")).to_contain_text("Queued")
    assert submission_count(module_sessions) == before + 1
    grade_while_watching(served_app, server_settings, inner, queued_id(module_sessions))
    expect(frame.locator("#live-result .diagnosis")).to_have_text(
        "Error while running", timeout=GRADING_MS
    )
    assert "missing_name" in code_in_editor(inner)
    assert inner.url == base_url + EXERCISE_PATH
    # The framing page was asked to fit the frame to the page, result included, and did.
    height = inner.evaluate("Math.ceil(document.documentElement.getBoundingClientRect().height)")
    page.wait_for_function("h => window.frameResizes.at(-1) === h", arg=height)
    assert page.evaluate("document.getElementById('tool').clientHeight") == height
    assert page.evaluate("window.frameResizes.length") >= 2  # the result made it taller
    # No LMS launch here: a session of this site's own, its page says no LMS origin.
    expect(frame.locator("body")).not_to_have_attribute("data-lms-origin", re.compile(".*"))
    assert_no_axe_violations(inner)
    screenshot(page, "exercise-framed-result")
    page.context.close()
