"""Practice said as practice and the learner steered to the course's exercise; a regrade's dry
run with its progress and what would change. In Chromium on a desktop, on a phone, and framed
by a page of another loopback origin (as an LMS frames it). Grading is real (the server's own
grading threads)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from app.db import SessionFactory
from app.models import SiteRole
from tests.app.conftest import CORRECT_CODE, EXERCISE, GRADING_TIMEOUT_SECONDS
from tests.app.people import PASSWORD, graded, make_course, make_user
from tests.browser.conftest import (
    assert_accessible_basics,
    assert_no_axe_violations,
    framing_lms,
    screenshot,
    signed_in_page,
)

LEARNER = "lee@example.edu"
TEACHER = "tess@example.edu"
COURSE = "Deep Learning 101"
GRADING_MS = GRADING_TIMEOUT_SECONDS * 1000


@pytest.fixture(scope="module")
def course_id(module_sessions: SessionFactory) -> str:
    make_user(module_sessions, TEACHER, SiteRole.INSTRUCTOR, name="Tess Teacher")
    lee = make_user(module_sessions, LEARNER, name="Lee Learner")
    course_id = make_course(module_sessions, TEACHER, LEARNER)
    # Correct code an older grader scored 2/10: a regrade would make it 10.
    graded(module_sessions, user_id=lee, course_id=course_id, score=2, code=CORRECT_CODE)
    return course_id


def write_code(page: Page, code: str) -> None:
    page.wait_for_function("() => window.loopgradeEditor")
    page.evaluate("code => window.loopgradeEditor.setValue(code)", code)


def test_desktop_practice_is_said_and_leads_to_the_course(
    browser: Browser, base_url: str, course_id: str
) -> None:
    page = signed_in_page(browser, base_url, LEARNER, PASSWORD)
    practice = page.locator(".practice-list li").filter(
        has=page.locator(f'a[href="/exercises/{EXERCISE}"]')
    )
    expect(practice.locator(".in-course")).to_contain_text(f"Counts in {COURSE}")
    assert_accessible_basics(page)
    screenshot(page, "desktop-home-practice")

    page.goto(f"/exercises/{EXERCISE}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Practice")
    steer = page.locator(".course-steer")
    expect(steer).to_contain_text(f"You are enrolled in {COURSE}, which sets this exercise")
    assert_accessible_basics(page)

    # A practice result: said as practice, with the offer to take the code to the course.
    write_code(page, CORRECT_CODE)
    page.get_by_role("button", name="Submit for grading").click()
    result = page.locator("#live-result #result")
    expect(result.locator(".score-value")).to_have_text("10 / 10", timeout=GRADING_MS)
    expect(result.locator(".practice-tag")).to_have_text("Practice: counts in no course")
    offer = result.locator(".course-offer")
    expect(offer).to_contain_text(f"To count it in {COURSE}")
    assert_accessible_basics(page)
    screenshot(page, "desktop-practice-result")
    offer.get_by_role("link", name=f"take this code to {COURSE}").click()
    page.wait_for_url(re.compile(rf"/courses/{course_id}/exercises/{EXERCISE}\?edit="))
    expect(page.locator("#carried-notice")).to_contain_text(f"not submitted in {COURSE} yet")
    page.wait_for_function("() => window.loopgradeEditor")
    assert page.evaluate("() => window.loopgradeEditor.getValue()").strip() == CORRECT_CODE.strip()
    assert_accessible_basics(page)
    screenshot(page, "desktop-practice-code-in-course")

    page.goto(f"/exercises/{EXERCISE}")
    page.locator(".course-steer").get_by_role("link", name=f"Do it in {COURSE}").click()
    page.wait_for_url(f"{base_url}/courses/{course_id}/exercises/{EXERCISE}?code=practice")
    # On the practice code just solved, not on the starter.
    page.wait_for_function("() => window.loopgradeEditor")
    assert page.evaluate("() => window.loopgradeEditor.getValue()").strip() == CORRECT_CODE.strip()
    expect(page.locator("#carried-notice")).to_contain_text(f"not submitted in {COURSE} yet")
    page.context.close()


def test_phone_practice_notice(browser: Browser, base_url: str, course_id: str) -> None:
    page = signed_in_page(browser, base_url, LEARNER, PASSWORD, phone=True)
    page.goto(f"/exercises/{EXERCISE}")
    expect(page.locator(".course-steer")).to_be_visible()
    expect(page.locator(".course-steer").get_by_role("link")).to_have_attribute(
        "href", f"/courses/{course_id}/exercises/{EXERCISE}?code=practice"
    )
    assert_accessible_basics(page)
    screenshot(page, "phone-practice-notice")
    page.context.close()


def run_dry_run(page: Page, course_id: str) -> None:
    page.goto(f"/courses/{course_id}/exercises/{EXERCISE}/regrade?which=all")
    page.get_by_role("button", name="Dry run first").click()
    status = page.locator("#result .status")
    expect(status).to_contain_text("1 of 1 graded: done", timeout=GRADING_MS)
    expect(status).to_contain_text("1 would change. Nothing was stored.")
    # Only the status line is said, once finished; the tables are read where they are.
    expect(page.locator("#result-announcement")).to_have_text(
        "1 of 1 graded: done; 1 would change. Nothing was stored."
    )
    assert page.locator("#result[aria-live], #result [aria-live]").count() == 0
    expect(page.locator(".dry-run-learners tbody tr")).to_have_count(1)
    expect(page.locator(".dry-run-learners tbody tr td").last).to_have_text("10")


def test_desktop_and_phone_dry_run(browser: Browser, base_url: str, course_id: str) -> None:
    page = signed_in_page(browser, base_url, TEACHER, PASSWORD)
    page.goto(f"/courses/{course_id}/exercises/{EXERCISE}/regrade?which=all")
    # No reason is chosen for the instructor.
    assert page.locator('input[name="reason"]:checked').count() == 0
    run_dry_run(page, course_id)
    assert_accessible_basics(page)
    screenshot(page, "desktop-regrade-dry-run")
    page.context.close()

    phone = signed_in_page(browser, base_url, TEACHER, PASSWORD, phone=True)
    run_dry_run(phone, course_id)
    assert_accessible_basics(phone)
    screenshot(phone, "phone-regrade-dry-run")
    phone.context.close()


def test_framed_by_another_origin(
    browser: Browser, base_url: str, course_id: str, module_sessions: SessionFactory
) -> None:
    learner = signed_in_page(browser, base_url, LEARNER, PASSWORD)
    teacher = signed_in_page(browser, base_url, TEACHER, PASSWORD)
    with framing_lms(base_url, module_sessions) as lms_origin:
        learner.goto(f"{lms_origin}/frame?src=/exercises/{EXERCISE}")
        frame = learner.frame_locator("iframe")
        expect(frame.locator(".course-steer")).to_contain_text(f"You are enrolled in {COURSE}")
        assert_no_axe_violations(learner.frames[1])
        screenshot(learner, "framed-practice-notice")
        frame.locator(".course-steer").get_by_role("link").click()
        # The course's exercise: no practice mark, no notice.
        expect(frame.locator("h1 .practice-tag")).to_have_count(0)
        expect(frame.locator(".course-steer")).to_have_count(0)
        assert learner.frames[1].url == (
            f"{base_url}/courses/{course_id}/exercises/{EXERCISE}?code=practice"
        )

        teacher.goto(
            f"{lms_origin}/frame?src=/courses/{course_id}/exercises/{EXERCISE}/regrade?which=all"
        )
        frame = teacher.frame_locator("iframe")
        frame.get_by_role("button", name="Dry run first").click()
        expect(frame.locator("#result .status")).to_contain_text(
            "1 of 1 graded: done", timeout=GRADING_MS
        )
        assert_no_axe_violations(teacher.frames[1])
        screenshot(teacher, "framed-regrade-dry-run")

        # The regrade for real: its progress page says its status line alone, once finished.
        frame.get_by_role("link", name="Regrade for real…").click()
        frame.get_by_label("The grader was corrected").check()
        frame.get_by_role("button", name="Regrade 1 submission").click()
        expect(frame.locator("#result-announcement")).to_have_text(
            "1 of 1 regraded: done; 1 changed.", timeout=GRADING_MS
        )
        assert frame.locator("#result[aria-live], #result [aria-live]").count() == 0
        assert_no_axe_violations(teacher.frames[1])
    learner.context.close()
    teacher.context.close()
