"""The learner's course home in Chromium: the overview (progress, due dates localised with a
countdown, how scores count), the practice strip, the code downloads; on a desktop, on a phone
(compact menu, the title on the first screen, the table as cards), with JavaScript off, and
framed by a page of another loopback origin (as an LMS frames it). No grading runs here: the
graded rows are written as a worker leaves them."""

from __future__ import annotations

import io
import re
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import update

from app.db import SessionFactory
from app.models import Assignment, SiteRole, utc_now
from graders.exercises import list_exercises
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

LEARNER = "lee@example.edu"

COUNT = len(list_exercises())
MOST = sum(e.max_score for e in list_exercises())


@pytest.fixture(scope="module")
def course_id(module_sessions: SessionFactory) -> str:
    make_user(module_sessions, "tess@example.edu", SiteRole.INSTRUCTOR, name="Tess Teacher")
    lee = make_user(module_sessions, LEARNER, name="Lee Learner")
    course_id = make_course(module_sessions, "tess@example.edu", LEARNER)
    with module_sessions.begin() as session:
        session.execute(
            update(Assignment)
            .where(Assignment.course_id == course_id, Assignment.exercise_id == EXERCISE)
            .values(due_at=utc_now() + timedelta(days=3, hours=5), late_penalty_percent_per_day=10)
        )
    graded(module_sessions, user_id=lee, course_id=course_id, score=7.0, code="# seven\n")
    graded(
        module_sessions,
        user_id=lee,
        course_id=course_id,
        score=10.0,
        exercise="prove-accumulation",
        code="# ten\n",
    )
    return course_id


def signed_in(browser: Browser, base_url: str, **options: bool) -> Page:
    page = signed_in_page(browser, base_url, LEARNER, PASSWORD, **options)
    expect(page.get_by_role("heading", level=1)).to_have_text("Your courses")
    return page


def test_desktop_overview_downloads_and_practice_strip(
    browser: Browser, base_url: str, course_id: str
) -> None:
    page = signed_in(browser, base_url)
    # Solved in the course: the practice strip on the home page says so, and so does the line
    # naming the course it counts in.
    practice = page.locator(".exercise-list li", has_text="Prove it: gradients accumulate")
    expect(practice.locator(".state-solved")).to_have_count(2)
    expect(practice.locator(".in-course .state-solved")).to_be_visible()
    page.goto(f"/courses/{course_id}")
    expect(page.locator(".progress-summary")).to_have_text(
        re.compile(rf"1 of {COUNT} solved,\s+17/{MOST:g} points")
    )
    expect(page.locator(".next-due")).to_contain_text(re.compile(r"in 3 days, (4|5) hours"))
    # time.js shows the due date in the browser's zone (not the server's "... UTC").
    due = page.locator(".course-exercises time:not([data-countdown])").first
    expect(due).not_to_have_text(re.compile("UTC$"))
    expect(page.locator(".overview")).to_contain_text("submitting again never lowers your score")
    assert_accessible_basics(page)
    screenshot(page, "desktop-learner-overview")

    with page.expect_download() as download:
        page.get_by_role("link", name=re.compile("Download all your code")).click()
    with zipfile.ZipFile(io.BytesIO(Path(download.value.path()).read_bytes())) as archive:
        assert sorted(archive.read(name) for name in archive.namelist()) == [
            b"# seven\n",
            b"# ten\n",
        ]
    page.get_by_role("link", name="All your submissions in this course").click()
    with page.expect_download() as download:
        page.get_by_role("link", name=re.compile("Download")).first.click()
    assert download.value.suggested_filename.endswith(".py")
    assert Path(download.value.path()).read_bytes() in (b"# seven\n", b"# ten\n")
    assert_accessible_basics(page)


def test_phone_menu_title_and_cards(browser: Browser, base_url: str, course_id: str) -> None:
    page = signed_in(browser, base_url, phone=True)
    page.goto(f"/courses/{course_id}")
    heading = page.get_by_role("heading", level=1)
    box = heading.bounding_box()
    assert box is not None and box["y"] + box["height"] < PHONE["height"] / 3, box
    # The navigation is one "Menu" until opened.
    expect(page.get_by_role("link", name="My submissions").first).to_be_hidden()
    # Each exercise is a card: its score is on the screen, not cut off to the right.
    row = page.locator(".course-exercises tbody tr", has_text="One training step")
    score = row.locator('td[data-label="Score"]')
    expect(score).to_contain_text("7 / 10")
    score_box = score.bounding_box()
    assert score_box is not None and score_box["x"] + score_box["width"] <= PHONE["width"]
    assert_accessible_basics(page)
    screenshot(page, "phone-learner-overview")
    page.get_by_text("Menu", exact=True).click()
    expect(
        page.locator(".phone-menu").get_by_role("link", name="My submissions").first
    ).to_be_visible()
    expect(page.locator(".phone-menu .course-nav")).to_contain_text("Exercises")
    assert_accessible_basics(page)
    screenshot(page, "phone-menu-open")
    page.goto("/history")
    assert_accessible_basics(page)
    screenshot(page, "phone-learner-history")


def test_without_javascript_the_dates_read_in_utc(
    browser: Browser, base_url: str, course_id: str
) -> None:
    context = browser.new_context(base_url=base_url, java_script_enabled=False)
    page = context.new_page()
    page.goto("/sign-in")
    page.get_by_label("Email").fill(LEARNER)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.goto(f"/courses/{course_id}")
    expect(page.locator(".course-exercises time[data-local]").first).to_have_text(
        re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$")
    )
    expect(page.locator(".next-due time[data-countdown]")).to_have_text(
        re.compile(r"^in 3 days, (4|5) hours$")
    )
    # (axe-core needs JavaScript: the same page is checked with it on above.)
    context.close()


def test_framed_by_another_origin(
    browser: Browser, base_url: str, course_id: str, module_sessions: SessionFactory
) -> None:
    page = signed_in(browser, base_url)
    # Another loopback origin (another port), registered as a platform: only this site and
    # registered platforms may frame the pages.
    with framing_lms(base_url, module_sessions) as lms_origin:
        page.goto(f"{lms_origin}/frame?src=/courses/{course_id}")
        frame = page.frame_locator("iframe")
        expect(frame.locator(".progress-summary")).to_contain_text(f"1 of {COUNT} solved")
        inner = page.frames[1]
        assert_no_axe_violations(inner)
        assert inner.evaluate("document.documentElement.scrollWidth <= innerWidth")
        screenshot(page, "framed-learner-overview")
        # The learner's own history, in the frame too.
        page.goto(f"{lms_origin}/frame?src=/history")
        expect(page.frame_locator("iframe").get_by_role("heading", level=1)).to_be_visible()
        inner = page.frames[1]
        assert inner.url == f"{base_url}/history"
        assert_no_axe_violations(inner)
        assert inner.evaluate("document.documentElement.scrollWidth <= innerWidth")
