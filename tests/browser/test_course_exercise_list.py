"""The settings page's exercise list, in Chromium, on a desktop, a phone and in an LMS frame:
an instructor moves an exercise first under a unit of its own, the course page lists it so, and
a place that is no number is refused with the reason; axe-core finds nothing."""

from __future__ import annotations

import contextlib

import pytest
from playwright.sync_api import Browser, FrameLocator, Page, expect

from app.db import SessionFactory
from app.models import SiteRole
from graders.exercises import list_exercises
from tests.app.people import PASSWORD, make_course, make_user
from tests.browser.conftest import (
    assert_accessible_basics,
    assert_no_axe_violations,
    framing_lms,
    screenshot,
    signed_in_page,
)

LAYOUTS = ["desktop", "phone", "framed"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_exercise_list_is_ordered_and_grouped_on_the_settings_page(
    browser: Browser, base_url: str, module_sessions: SessionFactory, layout: str
) -> None:
    teacher = f"lena-{layout}@example.edu"
    make_user(module_sessions, teacher, SiteRole.INSTRUCTOR, name="Lena Lister")
    course_url = f"/courses/{make_course(module_sessions, teacher)}"
    last = list_exercises()[-1]
    page = signed_in_page(browser, base_url, teacher, PASSWORD, phone=layout == "phone")
    with contextlib.ExitStack() as stack:
        if layout == "framed":
            lms_origin = stack.enter_context(framing_lms(base_url, module_sessions))
            page.goto(f"{lms_origin}/frame?src={course_url}/settings")
            root: Page | FrameLocator = page.frame_locator("iframe")
        else:
            page.goto(f"{course_url}/settings")
            root = page
        section = root.locator("section.exercise-list")
        section.get_by_label(f"Place of {last.title}").fill("1")
        section.get_by_label(f"Unit of {last.title}").fill("Warm-up")
        section.get_by_role("button", name="Save the order and units").click()
        expect(root.locator(".notice")).to_have_text(
            "The exercise list's order and units are saved."
        )
        expect(section.locator("tbody th").first).to_have_text(last.title)
        expect(section.get_by_label(f"Unit of {last.title}")).to_have_value("Warm-up")

        section.get_by_label(f"Place of {last.title}").fill("")
        section.get_by_role("button", name="Save the order and units").click()
        expect(root.locator("#list-error")).to_contain_text("give a whole number")
        if layout == "framed":
            inner = page.frames[1]
            assert_no_axe_violations(inner)
            assert inner.evaluate("document.documentElement.scrollWidth <= innerWidth")
        else:
            assert_accessible_basics(page)
        screenshot(page, f"{layout}-settings-exercise-list")

        if layout != "framed":
            page.goto(course_url)
            units = page.locator("table.course-exercises tr.unit-row th")
            expect(units.first).to_have_text("Warm-up")
            first_row = page.locator("table.course-exercises tbody tr:not(.unit-row)").first
            expect(first_row.locator("th")).to_have_text(last.title)
            assert_accessible_basics(page)
    page.context.close()
