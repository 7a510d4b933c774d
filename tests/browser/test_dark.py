"""The pages in a browser set to a dark colour scheme: dark all through (not only the editor),
and still WCAG 2.2 AA by axe-core, contrast included, on the learner's and the instructor's
pages with real results (graded here by the module's server, charts and failed checks shown).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from app.db import SessionFactory
from app.models import SiteRole
from tests.app.conftest import EXERCISE, MISSING_ZERO_GRAD_CODE
from tests.app.people import PASSWORD, make_course, make_user
from tests.browser.conftest import assert_accessible_basics, new_page, screenshot, signed_in_page

LEARNER, INSTRUCTOR = "dana@example.edu", "tess@example.edu"
DARK_BACKGROUND = "rgb(13, 17, 23)"  # --bg of style.css's dark scheme
DARK_BAD = "rgb(255, 123, 114)"  # --bad of the dark scheme: the learner's line in a chart
GRADING_MS = 180_000


@pytest.fixture(scope="module")
def course_id(module_sessions: SessionFactory) -> str:
    make_user(module_sessions, INSTRUCTOR, SiteRole.INSTRUCTOR, name="Tess Teacher")
    make_user(module_sessions, LEARNER, name="Dana Learner")
    return make_course(module_sessions, INSTRUCTOR, LEARNER)


def dark(page: Page) -> Page:
    page.emulate_media(color_scheme="dark")
    return page


def assert_dark(page: Page) -> None:
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert background == DARK_BACKGROUND, f"{page.url}: body background {background}"
    assert_accessible_basics(page)


def test_signed_out_pages_are_dark(browser: Browser, base_url: str) -> None:
    page = dark(new_page(browser, base_url))
    for path in ("/", "/sign-in", "/sign-up", f"/exercises/{EXERCISE}"):
        page.goto(path)
        assert_dark(page)
    # The editor is dark with the page, not a light box in it (nor the reverse).
    editor = page.locator(".cm-editor")
    expect(editor).to_be_visible()
    assert editor.evaluate("e => getComputedStyle(e).backgroundColor") == DARK_BACKGROUND
    screenshot(page, "dark-practice-exercise")


def test_a_learner_and_an_instructor_read_results_in_the_dark(
    browser: Browser, base_url: str, course_id: str
) -> None:
    page = dark(signed_in_page(browser, base_url, LEARNER, PASSWORD))
    assert_dark(page)
    page.goto(f"/courses/{course_id}/exercises/{EXERCISE}")
    page.wait_for_function("() => window.loopgradeEditor")
    page.evaluate("code => window.loopgradeEditor.setValue(code)", MISSING_ZERO_GRAD_CODE)
    page.get_by_role("button", name="Submit").click()
    result = page.locator("#live-result #result")
    expect(result.locator(".score-value")).to_be_visible(timeout=GRADING_MS)
    expect(result.locator(".diagnosis")).to_have_text(re.compile(r"\w"))
    expect(result.locator("tr.failed").first).to_be_visible()
    learner_line = result.locator(".chart path.learner").first
    expect(learner_line).to_be_visible()
    assert learner_line.evaluate("e => getComputedStyle(e).stroke") == DARK_BAD
    assert_dark(page)
    screenshot(page, "dark-exercise-result")
    page.get_by_role("link", name="This result on its own page").click()
    expect(page).to_have_url(re.compile(r"/submissions/[^/]+$"))
    page.get_by_text("The code you submitted").click()
    expect(page.locator(".numbered-code")).to_be_visible()
    assert_dark(page)
    page.goto(f"/courses/{course_id}")
    assert_dark(page)

    teacher = dark(signed_in_page(browser, base_url, INSTRUCTOR, PASSWORD))
    teacher.goto(f"/courses/{course_id}/exercises/{EXERCISE}/stats")
    expect(teacher.locator(".bar-chart").first).to_be_visible()
    assert_dark(teacher)
    screenshot(teacher, "dark-statistics")
    for path in ("gradebook", "submissions", "settings"):
        teacher.goto(f"/courses/{course_id}/{path}")
        assert_dark(teacher)
