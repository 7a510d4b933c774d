"""The LMS frames the tool from another site, in Chromium with third-party cookies blocked:
the launch signs the learner in with a Partitioned cookie and Submit works inside the frame;
the login's state goes through LTI Platform Storage (postMessage to the LMS page) when the
platform offers it; where no cookie is kept at all, the page offers a new window, which
works."""

from __future__ import annotations

import faulthandler
import re
import sys
import time
from collections.abc import Iterator

import psycopg
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    FrameLocator,
    Page,
    expect,
    sync_playwright,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from sqlalchemy import select

from app.db import SessionFactory
from app.integrations.models import LtiLoginState
from app.integrations.platforms import add_platform
from tests.app.conftest import CORRECT_CODE
from tests.browser.conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    assert_no_axe_violations,
    screenshot,
    wait_until_framing_allowed,
)
from tests.conftest import TEST_DATABASE_URL
from tests.lti.fake_platform import INSTRUCTOR, FakePlatform
from tests.servers import app_in_thread
from tests.services import libpq_url


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        # Chromium's own switch for blocking third-party cookies, as browsers now do.
        args = [*CHROMIUM_ARGS, "--test-third-party-cookie-phaseout"]
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield browser
        browser.close()


@pytest.fixture
def framing_platform(tool_url: str, sessions: SessionFactory) -> Iterator[FakePlatform]:
    """A platform on another site than the tool: localhost, while the tool is 127.0.0.1."""
    fake = FakePlatform(tool_url=tool_url)
    with app_in_thread(fake.app()) as url:
        fake.url = url.replace("127.0.0.1", "localhost")
        with sessions.begin() as session:
            add_platform(session, **fake.registration())
        wait_until_framing_allowed(tool_url, fake.url)
        yield fake


def open_lms_course(
    browser: Browser, platform: FakePlatform
) -> tuple[BrowserContext, Page, FrameLocator]:
    """The LMS's course page, once the tool in its frame shows the exercise."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    events = record_browser_events(context, page)
    page.goto(f"{platform.url}/course")
    frame = page.frame_locator("#tool")
    try:
        # Up to seven pages load in the frame (login, platform, launch, storage, ticket,
        # cookie check, exercise): a loaded machine needs more than the default 30 s.
        frame.get_by_role("button", name="Submit for grading").wait_for(timeout=90_000)
    except PlaywrightTimeout:
        # Bounded: a frame stuck in its navigation would keep an evaluate() waiting forever.
        try:
            shown = page.frames[-1].locator("body").inner_text(timeout=5_000)
        except PlaywrightTimeout:
            shown = "(the last frame shows no body)"
        report_server_state()
        print("browser:", *events, sep="\n  ", file=sys.stderr)
        raise AssertionError(f"the frames show {[f.url for f in page.frames]}: {shown}") from None
    return context, page, frame


def record_browser_events(context: BrowserContext, page: Page) -> list[str]:
    """The browser's requests, their ends and the pages' messages, as they happen."""
    events: list[str] = []
    started = time.monotonic()

    def note(text: str) -> None:
        events.append(f"{time.monotonic() - started:7.2f} s {text}")

    context.on("request", lambda r: note(f"request {r.method} {r.url[:120]}"))
    context.on("requestfinished", lambda r: note(f"finished {r.method} {r.url[:120]}"))
    context.on("requestfailed", lambda r: note(f"failed {r.url[:120]}: {r.failure}"))
    context.on("console", lambda m: note(f"console {m.type}: {m.text[:300]}"))
    page.on("pageerror", lambda e: note(f"page error: {e}"))
    page.on("framenavigated", lambda f: note(f"frame navigated: {f.url[:120]}"))
    return events


def report_server_state() -> None:
    """What the tool (served in this process) and its database were doing, on stderr."""
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    if TEST_DATABASE_URL:
        with psycopg.connect(libpq_url(TEST_DATABASE_URL)) as connection:
            rows = connection.execute(
                "SELECT pid, datname, state, wait_event_type, wait_event, now() - xact_start,"
                " pg_blocking_pids(pid), query FROM pg_stat_activity"
                " WHERE backend_type = 'client backend'"
            ).fetchall()
        for row in rows:
            print("pg_stat_activity:", row, file=sys.stderr)


def test_a_framed_launch_keeps_its_session_and_submits(
    browser: Browser,
    framing_platform: FakePlatform,
) -> None:
    context, page, frame = open_lms_course(browser, framing_platform)
    tool = page.frames[1]
    tool.wait_for_function("() => window.loopgradeEditor")
    tool.evaluate("code => window.loopgradeEditor.setValue(code)", CORRECT_CODE)
    frame.get_by_role("button", name="Submit for grading").click()
    # Not "Form expired": the frame kept its session, and the result comes in place.
    frame.locator("#live-result .score-value").wait_for(timeout=120_000)
    assert tool.url.endswith("/exercises/train-step")
    assert "Form expired" not in tool.content()
    (cookie,) = [c for c in context.cookies() if c["name"] == "loopgrade_session"]
    assert cookie["sameSite"] == "None" and cookie["secure"]
    assert cookie.get("partitionKey"), cookie  # CHIPS: kept per embedding site
    assert_frame_fits_the_tool(page, framing_platform)
    # The session is the LMS's: no "Sign out" in the frame (nor in its phone menu).
    expect(frame.get_by_role("button", name="Sign out")).to_have_count(0)
    expect(frame.locator("body")).to_have_attribute("data-lms-origin", framing_platform.url)
    # A learner gets no instructor's links.
    expect(frame.get_by_role("navigation", name="For instructors")).to_have_count(0)
    assert_no_axe_violations(page.frames[1])
    screenshot(page, "lti-framed-exercise")
    context.close()


def assert_frame_fits_the_tool(page: Page, platform: FakePlatform) -> None:
    """The tool asked the LMS page (at the LMS's origin: else the message is not delivered) to
    make the frame as tall as the tool's page, and the frame is that tall."""
    tool = page.frames[1]
    deadline = time.monotonic() + 60
    while True:
        height = tool.evaluate("Math.ceil(document.documentElement.getBoundingClientRect().height)")
        resizes = page.evaluate("window.frameResizes")
        if resizes and resizes[-1]["height"] == height:
            break
        assert time.monotonic() < deadline, f"the tool is {height} px tall; asked: {resizes}"
        page.wait_for_timeout(200)
    assert resizes[-1]["origin"] == platform.tool_url, resizes
    assert page.evaluate("document.getElementById('tool').clientHeight") == height


def test_an_instructor_arriving_from_the_lms_gets_the_course_s_marking(
    browser: Browser,
    framing_platform: FakePlatform,
) -> None:
    framing_platform.roles = [INSTRUCTOR]
    context, page, frame = open_lms_course(browser, framing_platform)
    # The launch lands on the exercise, with the way to the course's gradebook and submissions.
    links = frame.get_by_role("navigation", name="For instructors")
    submissions = links.get_by_role("link", name="Submissions of this exercise")
    expect(submissions).to_have_attribute(
        "href", re.compile(r"^/courses/[^/]+/submissions\?exercise=train-step$")
    )
    expect(frame.get_by_role("button", name="Sign out")).to_have_count(0)
    assert_no_axe_violations(page.frames[1])
    screenshot(page, "lti-framed-instructor-landing")
    links.get_by_role("link", name="Gradebook").click()
    expect(frame.get_by_role("heading", level=1)).to_have_text("Gradebook")
    # Every page of the LMS's session asks the frame to fit it.
    assert_frame_fits_the_tool(page, framing_platform)
    context.close()


def test_the_login_state_goes_through_the_lms_page_s_storage(
    browser: Browser,
    framing_platform: FakePlatform,
    sessions: SessionFactory,
) -> None:
    framing_platform.storage_target = "_parent"
    context, page, _ = open_lms_course(browser, framing_platform)
    # The tool's pages put the state in the LMS page and read it back, by postMessage.
    assert page.evaluate("window.ltiStorageLog") == ["lti.put_data", "lti.get_data"]
    with sessions() as session:
        (login,) = session.scalars(select(LtiLoginState))
        assert login.storage_target == "_parent" and login.used_at is not None
    assert page.frames[1].url.endswith("/exercises/train-step")
    assert_no_axe_violations(page.frames[1])
    context.close()


def test_without_any_cookie_the_frame_offers_a_new_window(
    framing_platform: FakePlatform,
) -> None:
    # The tool on plain http under a name that is not loopback: no browser keeps a cookie
    # for it inside another site's frame (no Secure, so no SameSite=None, no CHIPS).
    framing_platform.tool_url = framing_platform.tool_url.replace("127.0.0.1", "tool.test")
    args = [*CHROMIUM_ARGS, "--host-resolver-rules=MAP tool.test 127.0.0.1"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(30_000)
        page = context.new_page()
        page.goto(f"{framing_platform.url}/course")
        frame = page.frame_locator("#tool")
        link = frame.get_by_role("link", name="Open in a new window")
        link.wait_for()
        assert_no_axe_violations(page.frames[1])
        screenshot(page, "lti-framed-no-cookie")
        with context.expect_page() as popup_info:
            link.click()
        popup = popup_info.value
        # A window of its own is first-party: the one-time link signs in there.
        popup.get_by_role("button", name="Submit for grading").wait_for()
        assert popup.url.endswith("/exercises/train-step")
        browser.close()
