"""The misconception map in Chromium: reached from the statistics, read on a desktop, a phone
and inside an LMS's frame; accessible (axe-core), nothing wider than the screen. Graded rows
are written as a worker leaves them: no grading runs here (tests/app grades for real)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, expect

from app.db import SessionFactory
from app.models import SiteRole, utc_now
from tests.app.conftest import EXERCISE
from tests.app.people import PASSWORD, graded, make_course, make_user
from tests.browser.conftest import (
    PHONE,
    assert_accessible_basics,
    assert_no_axe_violations,
    framing_lms,
    screenshot,
    signed_in_page,
)

TEACHER = "tess@example.edu"


@pytest.fixture(scope="module")
def course_id(module_sessions: SessionFactory) -> str:
    make_user(module_sessions, TEACHER, SiteRole.INSTRUCTOR, name="Tess Teacher")
    alice = make_user(module_sessions, "alice@example.edu", name="Alice Adams")
    bob = make_user(module_sessions, "bob@example.edu", name="Bob Brown")
    course = make_course(module_sessions, TEACHER, "alice@example.edu", "bob@example.edu")
    start = utc_now() - timedelta(hours=3)
    for minute, (user, score, diagnosis) in enumerate(
        [
            (alice, 4.0, "missing-zero-grad"),
            (bob, 4.0, "missing-zero-grad"),
            (alice, 7.0, "zero-grad-before-step"),
            (bob, 4.0, "missing-zero-grad"),
            (alice, 10.0, "correct"),
            (bob, 4.0, "missing-zero-grad"),
        ]
    ):
        graded(
            module_sessions,
            user_id=user,
            course_id=course,
            score=score,
            diagnosis=diagnosis,
            created_at=start + timedelta(minutes=minute),
        )
    return course


def test_the_map_from_the_statistics_on_a_desktop(
    browser: Browser, base_url: str, course_id: str
) -> None:
    page = signed_in_page(browser, base_url, TEACHER, PASSWORD)
    page.goto(f"/courses/{course_id}/exercises/{EXERCISE}/stats")
    page.get_by_role("link", name="Misconception map and item analysis").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("misconception map")
    stuck = page.get_by_role("region", name="Stuck learners, by name")
    expect(stuck.locator("tbody tr")).to_have_count(1)
    expect(stuck).to_contain_text("Bob Brown")
    expect(stuck).to_contain_text("3 times in a row")
    chart = page.get_by_role("img", name="Moves between diagnoses (attempt to next attempt)")
    expect(chart).to_be_visible()
    assert_accessible_basics(page)
    screenshot(page, "desktop-misconception-map")
    # Beside the name's last submission: an extension and a mail, each a link of its own.
    stuck.get_by_role("link", name=re.compile("^Gradients not cleared")).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Submission by Bob Brown")


def test_the_map_on_a_phone_and_framed_by_an_lms(
    browser: Browser, base_url: str, course_id: str, module_sessions: SessionFactory
) -> None:
    url = f"/courses/{course_id}/exercises/{EXERCISE}/map"
    phone = signed_in_page(browser, base_url, TEACHER, PASSWORD, phone=True)
    phone.goto(url)
    box = phone.get_by_role("heading", level=1).bounding_box()
    assert box is not None and box["y"] < PHONE["height"] / 3
    assert_accessible_basics(phone)  # includes: nothing wider than the viewport
    screenshot(phone, "phone-misconception-map")

    page = signed_in_page(browser, base_url, TEACHER, PASSWORD)
    with framing_lms(base_url, module_sessions) as lms_origin:
        page.goto(f"{lms_origin}/frame?src={url}")
        frame = page.frame_locator("iframe")
        expect(frame.get_by_role("heading", level=1)).to_contain_text("misconception map")
        inner = page.frames[1]
        assert_no_axe_violations(inner)
        assert inner.evaluate("document.documentElement.scrollWidth <= innerWidth")
        screenshot(page, "framed-misconception-map")


@pytest.mark.parametrize("phone", [False, True], ids=["desktop", "phone"])
def test_a_learner_reports_a_diagnosis_that_looks_wrong(
    browser: Browser, base_url: str, course_id: str, phone: bool
) -> None:
    page = signed_in_page(browser, base_url, "bob@example.edu", PASSWORD, phone=phone)
    page.goto("/history")
    # A submission of its own for each: a reported one opens with its report shown.
    page.locator("table a[href^='/submissions/']:not([download])").nth(int(phone)).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Your submission")
    page.get_by_text("Does this diagnosis look wrong?").click()
    page.get_by_label("What did the grader get wrong? (optional)").fill("zero_grad is on line 2")
    assert_accessible_basics(page)
    page.get_by_role("button", name="Tell my instructors").click()
    expect(page.locator("p.notice[role=status]")).to_contain_text("your instructors see your note")
    expect(page.locator(".diagnosis-report")).to_contain_text("“zero_grad is on line 2”")
    assert_accessible_basics(page)
    screenshot(page, f"{'phone' if phone else 'desktop'}-diagnosis-report")
