"""Limits and extensions in Chromium: an instructor gives one learner a later due date from the
gradebook's row (what it changes said, then confirmed) and sets an attempt limit; the learner
sees their own terms. On a desktop, on a phone, and framed by another loopback origin as an
LMS frames it; axe-core clean."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from app.courses.membership import set_assignment
from app.db import SessionFactory
from app.models import LatePolicy, ScoringPolicy, SiteRole, utc_now
from tests.app.conftest import EXERCISE
from tests.app.people import PASSWORD, graded, make_course, make_user
from tests.browser.conftest import (
    assert_accessible_basics,
    assert_no_axe_violations,
    framing_lms,
    screenshot,
    signed_in_page,
)

LEARNER = "lee@example.edu"
OTHER = "max@example.edu"
TEACHER = "tess@example.edu"


@pytest.fixture(scope="module")
def course_id(module_sessions: SessionFactory) -> str:
    make_user(module_sessions, TEACHER, SiteRole.INSTRUCTOR, name="Tess Teacher")
    lee = make_user(module_sessions, LEARNER, name="Lee Learner")
    make_user(module_sessions, OTHER, name="Max Other")
    course_id = make_course(module_sessions, TEACHER, LEARNER, OTHER)
    with module_sessions.begin() as session:
        set_assignment(
            session,
            course_id=course_id,
            exercise_id=EXERCISE,
            assigned=True,
            due_at=utc_now() - timedelta(hours=2),
            late_policy=LatePolicy.PENALTY,
            late_penalty_percent_per_day=50.0,
            scoring_policy=ScoringPolicy.BEST,
        )
    # Lee's 10/10 an hour late: it counts 5 until the extension.
    graded(
        module_sessions,
        user_id=lee,
        course_id=course_id,
        score=10,
        created_at=utc_now() - timedelta(hours=1),
    )
    return course_id


def give_extension(page: Page, learner_name: str, new_due: str) -> None:
    """From the extensions page (learner chosen or not), through the confirmation."""
    page.get_by_label("Learner", exact=True).select_option(label=f"{learner_name} ({LEARNER})")
    page.get_by_label("Exercise", exact=True).select_option(value=EXERCISE)
    page.get_by_label("Their due date").fill(new_due)
    page.get_by_role("button", name="Review the change…").click()


def test_desktop_extension_from_the_gradebook_and_a_limit(
    browser: Browser, base_url: str, course_id: str
) -> None:
    page = signed_in_page(browser, base_url, TEACHER, PASSWORD)
    page.goto(f"/courses/{course_id}/gradebook")
    page.get_by_role("link", name="Extension… for Lee Learner").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Limits and extensions")
    # The gradebook's row chose the learner.
    expect(page.locator("#extension-learner option:checked")).to_have_text(
        f"Lee Learner ({LEARNER})"
    )
    assert_accessible_basics(page)
    new_due = (utc_now() + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    give_extension(page, "Lee Learner", new_due)
    confirm = page.locator(".confirm-extension")
    expect(confirm).to_contain_text("The learner's counted score changes from 5 to 10.")
    # The page lands on the question, not on <body>; then on what was done.
    expect(page.locator("#confirm-extension-heading")).to_be_focused()
    expect(confirm.locator(".extension-changes li")).to_have_count(1)
    assert_accessible_basics(page)
    screenshot(page, "desktop-extension-confirm")
    page.get_by_role("button", name="Confirm extension").click()
    expect(page.locator("p.notice")).to_have_text("Extension saved.")
    expect(page.locator("p.notice")).to_be_focused()
    expect(page.locator(".extensions-given tbody tr")).to_have_count(1)
    expect(page.locator(".extensions-given tbody th")).to_have_text("Lee Learner")

    page.locator(f"#attempts-{EXERCISE}").fill("3")
    page.get_by_role("button", name="Save limits").click()
    expect(page.locator("p.notice")).to_have_text("Limits saved.")
    expect(page.locator(f"#attempts-{EXERCISE}")).to_have_value("3")
    assert_accessible_basics(page)
    screenshot(page, "desktop-limits-and-extensions")
    page.context.close()

    learner = signed_in_page(browser, base_url, LEARNER, PASSWORD)
    learner.goto(f"/courses/{course_id}/exercises/{EXERCISE}")
    expect(learner.locator(".policy")).to_contain_text("(extended for you)")
    expect(learner.locator("#limits")).to_contain_text("2 of 3 submissions left")
    assert_accessible_basics(learner)
    screenshot(learner, "desktop-exercise-extended")
    learner.goto(f"/courses/{course_id}")
    expect(learner.locator(".tag-extended")).to_have_text("extended for you")
    learner.context.close()


def test_phone_limits_and_extensions(browser: Browser, base_url: str, course_id: str) -> None:
    page = signed_in_page(browser, base_url, TEACHER, PASSWORD, phone=True)
    page.goto(f"/courses/{course_id}/extensions")
    expect(page.get_by_role("button", name="Save limits")).to_be_visible()
    assert_accessible_basics(page)
    screenshot(page, "phone-limits-and-extensions")
    page.context.close()


def test_framed_by_another_origin(
    browser: Browser, base_url: str, course_id: str, module_sessions: SessionFactory
) -> None:
    teacher = signed_in_page(browser, base_url, TEACHER, PASSWORD)
    with framing_lms(base_url, module_sessions) as lms_origin:
        teacher.goto(f"{lms_origin}/frame?src=/courses/{course_id}/extensions")
        frame = teacher.frame_locator("iframe")
        frame.get_by_label("Learner", exact=True).select_option(label=f"Max Other ({OTHER})")
        frame.get_by_label("Exercise", exact=True).select_option(value=EXERCISE)
        later = (utc_now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
        frame.get_by_label("Their due date").fill(later)
        frame.get_by_role("button", name="Review the change…").click()
        expect(frame.locator(".confirm-extension")).to_contain_text(
            "The learner's counted score does not change (nothing)."
        )
        assert_no_axe_violations(teacher.frames[1])
        frame.get_by_role("button", name="Confirm extension").click()
        expect(frame.locator("p.notice")).to_have_text("Extension saved.")
        expect(frame.locator(".extensions-given tbody tr")).to_have_count(2)
        assert_no_axe_violations(teacher.frames[1])
        screenshot(teacher, "framed-limits-and-extensions")
    teacher.context.close()
