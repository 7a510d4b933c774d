"""Hints in Chromium: the instructor sets them on the settings page (a bad lesson link refused
in the form), the learner opens them one at a time with the button (in place with JavaScript),
on a desktop, a phone and inside an LMS's frame, on the submission page and under a result
shown in place on the exercise page; accessible (axe-core), nothing wider than the screen.
Graded rows are written as a worker leaves them, but for the exercise page's, graded for real."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from app.db import SessionFactory
from app.models import Course, SiteRole, Submission, SubmissionStatus, utc_now
from app.people.accounts import find_user_by_email
from graders.hints import hints_for
from tests.app.conftest import EXERCISE, MISSING_ZERO_GRAD_CODE
from tests.app.people import PASSWORD, graded, make_course, make_user
from tests.browser.conftest import (
    assert_accessible_basics,
    assert_no_axe_violations,
    framing_lms,
    screenshot,
    signed_in_page,
)
from tests.browser.test_course_flow import set_code, wait_for_result

TEACHER = "tess@example.edu"
LEARNERS = (
    "dora@example.edu",
    "emil@example.edu",
    "fay@example.edu",
    "gus@example.edu",
    "hal@example.edu",
)
HINTS = hints_for(EXERCISE, "missing-zero-grad")


@pytest.fixture(scope="module")
def course_id(module_sessions: SessionFactory) -> str:
    make_user(module_sessions, TEACHER, SiteRole.INSTRUCTOR, name="Tess Teacher")
    ids = [make_user(module_sessions, email) for email in LEARNERS]
    course = make_course(module_sessions, TEACHER, *LEARNERS)
    for user_id in ids:
        graded(module_sessions, user_id=user_id, course_id=course, score=4)
    return course


def _first_hint(page: Page) -> None:
    """Open the first hint with the button; the second waits for one more attempt."""
    assert HINTS is not None
    hints = page.get_by_role("region", name="Hints for Gradients not cleared before backward")
    expect(hints.get_by_role("link", name="Read the part of the lesson")).to_be_visible()
    hints.get_by_role("button", name="Show a hint (1 of 3)").click()
    first = hints.locator("#hint-1")
    expect(first).to_contain_text("Look at the first of the three lines")
    expect(first).to_be_focused()
    expect(hints.get_by_role("button", name="Show a hint (2 of 3)")).to_be_disabled()
    expect(hints).to_contain_text("Opens after 1 more attempt with this diagnosis")


def test_the_settings_then_a_hint_on_a_desktop(
    browser: Browser, base_url: str, course_id: str, module_sessions: SessionFactory
) -> None:
    teacher = signed_in_page(browser, base_url, TEACHER, PASSWORD)
    teacher.goto(f"/courses/{course_id}/settings")
    fieldset = teacher.get_by_role("group", name="Hints and lesson links")
    fieldset.get_by_label("Attempts with the same diagnosis before each next hint").fill("1")
    fieldset.get_by_label("Lesson link for every diagnosis").fill("ftp://lessons.example.org")
    teacher.once("dialog", lambda dialog: dialog.accept())
    teacher.get_by_role("button", name="Save settings").click()
    expect(teacher.locator("#settings-error")).to_contain_text("Hints: The lesson link must be")
    expect(teacher.locator("#hint-settings-error")).to_be_visible()
    assert_accessible_basics(teacher)
    screenshot(teacher, "desktop-hint-settings-refused")
    fieldset.get_by_label("Lesson link for every diagnosis").fill("")
    teacher.get_by_role("button", name="Save settings").click()
    expect(teacher.locator("p.notice[role=status]")).to_contain_text("Settings saved.")
    with module_sessions() as session:
        assert session.get(Course, course_id).hint_unlock_attempts == 1  # type: ignore[union-attr]

    page = signed_in_page(browser, base_url, LEARNERS[0], PASSWORD)
    page.goto("/history")
    page.locator("table a[href^='/submissions/']:not([download])").first.click()
    url = page.url
    _first_hint(page)
    assert page.url == url  # in place: no new page
    assert_accessible_basics(page)
    screenshot(page, "desktop-hint-opened")
    page.reload()  # opened once, kept
    expect(page.locator("#hint-1")).to_be_visible()


def test_a_hint_on_a_phone_and_framed_by_an_lms(
    browser: Browser, base_url: str, course_id: str, module_sessions: SessionFactory
) -> None:
    phone = signed_in_page(browser, base_url, LEARNERS[1], PASSWORD, phone=True)
    phone.goto("/history")
    phone.locator("table a[href^='/submissions/']:not([download])").first.click()
    _first_hint(phone)
    assert_accessible_basics(phone)  # includes: nothing wider than the viewport
    screenshot(phone, "phone-hint-opened")

    page = signed_in_page(browser, base_url, LEARNERS[2], PASSWORD)
    page.goto("/history")
    path = page.locator("table a[href^='/submissions/']:not([download])").first.get_attribute(
        "href"
    )
    assert path is not None
    with framing_lms(base_url, module_sessions) as lms_origin:
        page.goto(f"{lms_origin}/frame?src={path}")
        frame = page.frame_locator("iframe")
        expect(frame.get_by_role("heading", level=1)).to_have_text("Your submission")
        frame.get_by_role("button", name="Show a hint (1 of 3)").click()
        expect(frame.locator("#hint-1")).to_contain_text("Look at the first of the three lines")
        inner = page.frames[1]
        assert_no_axe_violations(inner)
        assert inner.evaluate("document.documentElement.scrollWidth <= innerWidth")
        screenshot(page, "framed-hint-opened")


def test_hints_arrive_with_a_result_graded_while_the_page_is_open(
    browser: Browser, base_url: str, course_id: str, module_sessions: SessionFactory
) -> None:
    """The page opened while grading: once the result is in, so is the hints' button."""
    with module_sessions() as session:
        user_id = find_user_by_email(session, LEARNERS[3]).id  # type: ignore[union-attr]
    submission_id = graded(module_sessions, user_id=user_id, course_id=course_id, score=4)
    with module_sessions.begin() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        # Held by a grader that is still running: no one else takes it up meanwhile.
        row.status, row.score, row.diagnosis = SubmissionStatus.RUNNING, None, None
        row.started_at, row.lease_expires_at = utc_now(), utc_now() + timedelta(hours=1)
    page = signed_in_page(browser, base_url, LEARNERS[3], PASSWORD)
    page.goto(f"/submissions/{submission_id}")
    expect(page.locator("#result")).to_have_attribute("data-finished", "false")
    expect(page.get_by_role("button", name=re.compile("Show a hint"))).to_have_count(0)
    with module_sessions.begin() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        row.status, row.score, row.diagnosis = SubmissionStatus.GRADED, 4, "missing-zero-grad"
        row.lease_expires_at = None
    expect(page.locator("#result")).to_have_attribute("data-finished", "true")
    hints = page.get_by_role("region", name="Hints for Gradients not cleared before backward")
    expect(hints.get_by_role("button", name="Show a hint (1 of 3)")).to_be_visible()


def test_a_result_on_the_exercise_page_brings_its_hints(
    browser: Browser, base_url: str, course_id: str
) -> None:
    """Graded for real: the result shown in place under the editor has its hints' button."""
    page = signed_in_page(browser, base_url, LEARNERS[4], PASSWORD)
    page.goto(f"/courses/{course_id}/exercises/{EXERCISE}")
    set_code(page, MISSING_ZERO_GRAD_CODE)
    page.get_by_role("button", name="Submit for grading").click()
    assert wait_for_result(page) == "missing-zero-grad"
    panel = page.locator("#live-result")
    hints = panel.get_by_role("region", name="Hints for Gradients not cleared before backward")
    hints.get_by_role("button", name="Show a hint (1 of 3)").click()
    expect(panel.locator("#hint-1")).to_contain_text("Look at the first of the three lines")
    assert page.url.endswith(f"/exercises/{EXERCISE}")  # still the exercise page
    assert_accessible_basics(page)
    screenshot(page, "desktop-exercise-hint-opened")
