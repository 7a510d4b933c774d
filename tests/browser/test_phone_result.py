"""The phone page (390 px) in Chromium: nothing wider than the screen (a prompt's long inline
code, the account's sessions table), and after a result what to do next first: the diagnosis,
its hints and "Next exercise", then the charts and the checks, the passed ones folded. Grading is
real (the server's own grading threads): two gradings in all."""

from __future__ import annotations

import itertools
import re

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from app.db import SessionFactory
from tests.app.conftest import CORRECT_CODE, EXERCISE, GRADING_TIMEOUT_SECONDS
from tests.app.people import PASSWORD, make_user
from tests.browser.conftest import PHONE, assert_no_axe_violations, screenshot

LEARNER = "pat@example.edu"
GRADING_MS = GRADING_TIMEOUT_SECONDS * 1000
# A real phone's browser, as the sessions table names it.
PIXEL_USER_AGENT = (
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0.6099.144 Mobile Safari/537.36"
)
# The lesson's first mistake: a diagnosis with hints, and some checks still pass.
MISSING_ZERO_GRAD = """\
def train_step(model, optimizer, loss_fn, x, y):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
"""


@pytest.fixture(scope="module")
def learner(module_sessions: SessionFactory) -> str:
    return make_user(module_sessions, LEARNER, name="Pat Phone")


def phone_page(browser: Browser, base_url: str) -> Page:
    context = browser.new_context(
        base_url=base_url,
        viewport=PHONE,
        is_mobile=True,
        has_touch=True,
        user_agent=PIXEL_USER_AGENT,
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto("/sign-in")
    page.get_by_label("Email").fill(LEARNER)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/")
    return page


def assert_as_wide_as_the_screen(page: Page) -> None:
    widths = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths == [PHONE["width"], PHONE["width"]], widths


def top_of(locator: Locator) -> float:
    box = locator.bounding_box()
    assert box is not None, locator
    return box["y"]


def assert_in_order(*locators: Locator) -> None:
    """Each element comes after the one before, in the document and on the screen."""
    for before, after in itertools.pairwise(locators):
        follows = before.evaluate(
            "(a, b) => Boolean(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING)",
            after.element_handle(),
        )
        assert follows, (before, after)
        assert top_of(before) < top_of(after), (before, after)


def submit(page: Page, code: str) -> Locator:
    page.wait_for_function("() => window.loopgradeEditor")
    page.evaluate("code => window.loopgradeEditor.setValue(code)", code)
    page.get_by_role("button", name="Submit for grading").click()
    result = page.locator("#live-result #result")
    expect(result).to_have_attribute("data-finished", "true", timeout=GRADING_MS)
    return result


def test_long_inline_code_wraps_and_the_sessions_table_fits(
    browser: Browser, base_url: str, learner: str
) -> None:
    page = phone_page(browser, base_url)
    # The clip-gradients prompt has the longest inline code of all.
    page.goto("/exercises/clip-gradients")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Clip")
    assert_as_wide_as_the_screen(page)
    screenshot(page, "phone-clip-gradients-prompt")

    page.goto("/account")
    sessions = page.locator("#sessions")
    # A browser by its name, not the User-Agent string.
    expect(sessions.locator("tbody tr").first).to_contain_text("Chrome 120 on Android")
    expect(sessions).not_to_contain_text("Mozilla/5.0")
    box = sessions.bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"], box
    assert_as_wide_as_the_screen(page)
    screenshot(page, "phone-account-sessions")
    page.context.close()


def test_after_a_result_what_to_do_next_comes_first(
    browser: Browser, base_url: str, learner: str
) -> None:
    page = phone_page(browser, base_url)
    page.goto(f"/exercises/{EXERCISE}")

    # A mistake: the diagnosis, then its hints, then the charts and the failed checks; the
    # passed checks folded under how many they are.
    result = submit(page, MISSING_ZERO_GRAD)
    expect(result.locator(".score .diagnosis")).to_have_attribute("data-code", "missing-zero-grad")
    hints = result.locator(".result-next-steps #hints")
    expect(hints.get_by_role("heading")).to_contain_text("Hints for")
    passed = result.locator("details.passed-checks")
    expect(passed.locator("summary")).to_have_text(re.compile(r"^\d+ checks? passed$"))
    assert passed.get_attribute("open") is None
    expect(result.locator("#checks-passed")).to_be_hidden()
    assert_in_order(
        result.locator(".score"),
        result.locator(".feedback"),
        hints,
        result.locator(".charts"),
        result.locator("#checks-failed"),
        passed,
    )
    assert_as_wide_as_the_screen(page)
    assert_no_axe_violations(page)
    screenshot(page, "phone-result-mistake")
    # Unfolded, the passed checks are there, and the page is no wider for them.
    passed.locator("summary").click()
    expect(result.locator("#checks-passed tbody tr").first).to_be_visible()
    assert_as_wide_as_the_screen(page)

    # Solved: "Next exercise" right after the feedback, every check passed and folded.
    result = submit(page, CORRECT_CODE)
    expect(result.locator(".score-value")).to_have_text("10 / 10")
    next_exercise = result.locator(".result-next-steps .next-exercise a")
    expect(next_exercise).to_contain_text("Next exercise:")
    expect(result.locator("#checks-failed")).to_have_count(0)
    assert_in_order(
        result.locator(".score"),
        result.locator(".feedback"),
        next_exercise,
        result.locator("details.passed-checks"),
    )
    assert_as_wide_as_the_screen(page)
    assert_no_axe_violations(page)
    screenshot(page, "phone-result-solved")
    page.context.close()
