"""The counted score in Chromium, on a desktop, a phone and inside a cross-site LMS frame: the
override form says what it does to the counted score before saving, and a late result says
what it counts and why. Graded rows are written as a worker leaves them: no grading runs."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Page, expect

from app.db import SessionFactory
from app.models import SiteRole, utc_now
from tests.app.people import PASSWORD, graded, make_course, make_user
from tests.app.test_counted_scores import set_policy
from tests.browser.conftest import (
    assert_accessible_basics,
    assert_no_axe_violations,
    framing_lms,
    screenshot,
    signed_in_page,
)

TEACHER = "tess@example.edu"
LATE_WORDS = (
    "Submitted 2 hours late: 1 started day \N{MULTIPLICATION SIGN} 20% = \N{MINUS SIGN}20% "
    "(a day counts from its first minute); counts 8/10"
)


@pytest.fixture(scope="module")
def course(module_sessions: SessionFactory) -> dict[str, str]:
    """Ann solved it on time after an older 3/10; Ben solved it two hours late (-20%/day)."""
    make_user(module_sessions, TEACHER, SiteRole.INSTRUCTOR, name="Tess Teacher")
    ann = make_user(module_sessions, "ann@example.edu", name="Ann Archer")
    ben = make_user(module_sessions, "ben@example.edu", name="Ben Baker")
    course_id = make_course(module_sessions, TEACHER, "ann@example.edu", "ben@example.edu")
    now = utc_now()
    set_policy(
        module_sessions, course_id, due_at=now - timedelta(hours=3), late_penalty_percent_per_day=20
    )
    ids = {
        name: graded(
            module_sessions,
            user_id=user_id,
            course_id=course_id,
            score=score,
            created_at=now - timedelta(hours=hours_ago),
        )
        for name, user_id, score, hours_ago in (
            ("older", ann, 3, 5),
            ("solve", ann, 10, 4),
            ("late", ben, 10, 1),
        )
    }
    return {"course": course_id, **ids}


def signed_in(browser: Browser, base_url: str, email: str, *, phone: bool = False) -> Page:
    return signed_in_page(browser, base_url, email, PASSWORD, phone=phone)


def ask_to_override(page: Page, score: str, reason: str) -> None:
    page.get_by_label(re.compile("^Score")).fill(score)
    page.get_by_label("Reason").fill(reason)
    page.get_by_role("button", name="Set override").click()


def test_an_override_of_an_older_attempt_says_the_solve_still_counts(
    browser: Browser, base_url: str, course: dict[str, str]
) -> None:
    page = signed_in(browser, base_url, TEACHER)
    page.goto(f"/submissions/{course['older']}")
    ask_to_override(page, "7", "partial credit")
    confirm = page.locator(".confirm-override")
    expect(confirm.get_by_role("heading")).to_have_text("Override this score to 7?")
    expect(confirm.get_by_role("heading")).to_be_focused()  # not <body>
    expect(confirm).to_contain_text(
        "This does not change the counted score: a better attempt counts (10)."
    )
    assert_accessible_basics(page)
    screenshot(page, "desktop-override-confirm")
    confirm.get_by_role("button", name="Confirm override").click()
    expect(page.locator(".notice")).to_contain_text("Override set")

    page.goto(f"/courses/{course['course']}/gradebook")
    ann_row = page.locator("table.gradebook tbody tr", has_text="Ann Archer")
    expect(ann_row.locator('td[data-label^="One training step"]')).to_contain_text("10")
    ben_cell = page.locator("table.gradebook tbody tr", has_text="Ben Baker").locator(
        'td[data-label^="One training step"]'
    )
    expect(ben_cell).to_contain_text("8")
    # The tag marks it; the one wording of lateness is its title and what a screen reader says.
    expect(ben_cell.locator(".tag")).to_have_text(f"late \N{MINUS SIGN}20% ({LATE_WORDS})")
    expect(ben_cell.locator(".tag")).to_have_attribute("title", LATE_WORDS)
    page.goto(f"/courses/{course['course']}/audit")
    expect(page.locator(".audit-log li").first).to_contain_text(
        "score 3 → 7: “partial credit”; the counted score stays 10."
    )

    # An override of the solve itself would lower it: said, then cancelled.
    page.goto(f"/submissions/{course['solve']}")
    ask_to_override(page, "5", "copied")
    expect(page.locator(".confirm-override")).to_contain_text(
        "This changes the counted score from 10 to 7."
    )
    page.get_by_role("link", name="Cancel").click()
    expect(page.locator(".confirm-override")).to_have_count(0)
    expect(page.locator("#result .score-value")).to_have_text("10 / 10")


def test_a_late_result_says_what_it_counts_on_a_desktop_and_a_phone(
    browser: Browser, base_url: str, course: dict[str, str]
) -> None:
    for phone in (False, True):
        page = signed_in(browser, base_url, "ben@example.edu", phone=phone)
        page.goto(f"/submissions/{course['late']}")
        expect(page.locator("#result .score-value")).to_have_text("10 / 10")
        expect(page.locator("#result .counted")).to_have_text(f"· {LATE_WORDS}")
        assert_accessible_basics(page)
        screenshot(page, f"{'phone' if phone else 'desktop'}-late-result")
        page.goto(f"/history?course={course['course']}")
        expect(page.locator("table.history .counted")).to_have_text(LATE_WORDS)
        assert_accessible_basics(page)


def test_the_confirmation_and_the_late_words_in_a_cross_site_lms_frame(
    browser: Browser, base_url: str, course: dict[str, str], module_sessions: SessionFactory
) -> None:
    teacher = signed_in(browser, base_url, TEACHER)
    learner = signed_in(browser, base_url, "ben@example.edu")
    with framing_lms(base_url, module_sessions) as lms_origin:
        learner.goto(f"{lms_origin}/frame?src=/submissions/{course['late']}")
        frame = learner.frame_locator("iframe")
        expect(frame.locator("#result .counted")).to_have_text(f"· {LATE_WORDS}")
        assert_no_axe_violations(learner.frames[1])
        screenshot(learner, "framed-late-result")

        teacher.goto(f"{lms_origin}/frame?src=/submissions/{course['late']}")
        frame = teacher.frame_locator("iframe")
        frame.get_by_label(re.compile("^Score")).fill("9")
        frame.get_by_label("Reason").fill("the LMS was down")
        frame.get_by_role("button", name="Set override").click()
        expect(frame.locator(".confirm-override")).to_contain_text(
            "This changes the counted score from 8 to 9."
        )
        inner = teacher.frames[1]
        assert_no_axe_violations(inner)
        assert inner.evaluate("document.documentElement.scrollWidth <= innerWidth")
        screenshot(teacher, "framed-override-confirm")
        frame.get_by_role("button", name="Confirm override").click()
        expect(frame.locator(".notice")).to_contain_text("Override set")
        expect(frame.locator("#result .graded-score")).to_contain_text(
            "overridden by your instructor to 9/10"
        )


def test_moving_the_due_date_says_first_how_many_counted_scores_change(
    browser: Browser, base_url: str, course: dict[str, str]
) -> None:
    """Runs last: Ann's on-time solve becomes late (10 -> 8); Ben's stays as overridden."""
    page = signed_in(browser, base_url, TEACHER)
    page.goto(f"/courses/{course['course']}/settings")
    # In the browser's own zone, as the page's time.js shows and sends it.
    earlier = (utc_now() - timedelta(hours=6)).astimezone().strftime("%Y-%m-%dT%H:%M")
    page.locator("#due-train-step").fill(earlier)
    page.get_by_role("button", name="Save settings").click()
    said = page.locator("#confirm-counted")
    expect(said).to_contain_text("Not saved yet: this changes counted scores")
    expect(said).to_contain_text(
        "One training step: zero, backward, step: the counted score of 1 learner changes"
    )
    expect(page.locator("#due-train-step")).to_have_value(earlier)
    assert_accessible_basics(page)
    screenshot(page, "desktop-settings-confirm-counted")
    page.get_by_role("button", name="Confirm and save settings").click()
    expect(page.locator(".notice")).to_contain_text("Settings saved.")
    page.goto(f"/courses/{course['course']}/audit")
    expect(page.locator(".audit-log li").first).to_contain_text("(1 counted score changed)")
