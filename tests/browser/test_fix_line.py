"""The replayed fix on a learner's result: the chart's third line (dotted), its legend entry and
its text alternative, on a desktop and on a phone, axe-core clean. Grading is real (the module's
server grades the submission)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from app.db import SessionFactory
from tests.app.conftest import EXERCISE, GRADING_TIMEOUT_SECONDS, MISSING_ZERO_GRAD_CODE
from tests.app.people import PASSWORD, make_user
from tests.browser.conftest import assert_accessible_basics, screenshot, signed_in_page

LEARNER = "fay@example.edu"
GRADING_MS = GRADING_TIMEOUT_SECONDS * 1000
OK_GREEN = "rgb(23, 111, 44)"  # --ok of the light scheme: the fixed loop's line
SAID = "Your loop with optimizer.zero_grad() before backward(): "


@pytest.fixture(scope="module")
def learner(module_sessions: SessionFactory) -> str:
    return make_user(module_sessions, LEARNER, name="Fay Learner")


def assert_fix_drawn(page: Page, result: Locator) -> None:
    chart = result.locator("svg.chart").filter(has=page.locator("path.fixed")).first
    expect(chart).to_be_visible()
    line = chart.locator("path.fixed")
    expect(line).to_be_visible()
    assert line.evaluate("e => getComputedStyle(e).stroke") == OK_GREEN
    legend = chart.locator("text.fixed-label")
    expect(legend).to_be_visible()
    # Its label in up to two lines (tspans) under the plot.
    lines = legend.evaluate("e => [...e.querySelectorAll('tspan')].map(t => t.textContent)")
    # This fix is the reference's loop: the label says so, the dotted line lying on its line.
    assert " ".join(lines) == (
        "your loop with optimizer.zero_grad() before backward() Your fix matches the reference."
    )
    assert SAID in (chart.locator("desc").text_content() or "")
    expect(result.locator(".charts figcaption")).to_contain_text(
        "dotted: your own loop replayed with only its mistake fixed"
    )


def test_a_learner_sees_their_loop_with_the_fix_on_desktop_and_phone(
    browser: Browser, base_url: str, learner: str
) -> None:
    page = signed_in_page(browser, base_url, LEARNER, PASSWORD)
    page.goto(f"/exercises/{EXERCISE}")
    page.wait_for_function("() => window.loopgradeEditor")
    page.evaluate("code => window.loopgradeEditor.setValue(code)", MISSING_ZERO_GRAD_CODE)
    page.get_by_role("button", name="Submit").click()
    result = page.locator("#live-result #result")
    expect(result.locator(".score-value")).to_be_visible(timeout=GRADING_MS)
    assert_fix_drawn(page, result)
    assert_accessible_basics(page)
    screenshot(page, "desktop-fix-line")
    page.get_by_role("link", name="This result on its own page").click()
    expect(page).to_have_url(re.compile(r"/submissions/[^/]+$"))
    own_page = page.url.removeprefix(base_url)

    phone = signed_in_page(browser, base_url, LEARNER, PASSWORD, phone=True)
    phone.goto(own_page)
    assert_fix_drawn(phone, phone.locator("#result"))
    assert_accessible_basics(phone)
    screenshot(phone, "phone-fix-line")
