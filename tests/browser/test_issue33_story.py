"""Issue 33 end to end in Chromium, graded for real: an instructor sets hints to open one level
per attempt; a learner submits train-step's zero-grad-missing bug three times from the exercise
page and, after each, opens the level just unlocked (the next one refused until one more
attempt) and sees their loop replayed with the fix; the instructor's misconception map then
names the learner as stuck, with a link to the latest code, and its CSV says the same.
On a desktop, axe-core clean on each page."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from app.db import SessionFactory
from app.models import SiteRole
from graders.hints import hints_for
from tests.app.conftest import EXERCISE, REPO
from tests.app.people import PASSWORD, make_course, make_user
from tests.browser.conftest import assert_accessible_basics, screenshot, signed_in_page
from tests.browser.test_course_flow import set_code, wait_for_result
from tests.browser.test_fix_line import assert_fix_drawn

TEACHER = "tess@example.edu"
LEARNER = "noor@example.edu"
LEARNER_NAME = "Noor Learner"
BUG = (REPO / "exercises" / EXERCISE / "bugs" / "no_zero_grad.py").read_text(encoding="utf-8")
HINTS = hints_for(EXERCISE, "missing-zero-grad")
assert HINTS is not None
# Each level's words up to its first code span: rendered, the backticks are gone.
HINT_WORDS = [text.split("`")[0].strip() for text in HINTS.levels]


def assert_titles_fit(page: Page) -> None:
    """Every chart's title ends inside its chart (an SVG clips what runs past its width)."""
    overflowing = page.evaluate(
        """() => [...document.querySelectorAll('svg.chart text.chart-title')]
          .map(t => [t.textContent, t.getBBox().x + t.getBBox().width,
                     t.ownerSVGElement.viewBox.baseVal.width])
          .filter(([, end, width]) => end > width)"""
    )
    assert overflowing == [], (
        f"chart titles cut off (text, its end, the chart's width): {overflowing}"
    )


@pytest.fixture(scope="module")
def course_id(module_sessions: SessionFactory) -> str:
    make_user(module_sessions, TEACHER, SiteRole.INSTRUCTOR, name="Tess Teacher")
    make_user(module_sessions, LEARNER, name=LEARNER_NAME)
    return make_course(module_sessions, TEACHER, LEARNER)


def test_three_attempts_unlock_the_hints_and_the_map_names_the_learner_stuck(
    browser: Browser, base_url: str, course_id: str, tmp_path: Path
) -> None:
    teacher = signed_in_page(browser, base_url, TEACHER, PASSWORD)
    teacher.goto(f"/courses/{course_id}/settings")
    hint_settings = teacher.get_by_role("group", name="Hints and lesson links")
    hint_settings.get_by_label("Attempts with the same diagnosis before each next hint").fill("1")
    teacher.get_by_role("button", name="Save settings").click()
    expect(teacher.locator("p.notice[role=status]")).to_contain_text("Settings saved.")
    assert_accessible_basics(teacher)

    page = signed_in_page(browser, base_url, LEARNER, PASSWORD)
    latest = ""
    for attempt in (1, 2, 3):
        page.goto(f"/courses/{course_id}/exercises/{EXERCISE}")
        set_code(page, BUG)
        page.get_by_role("button", name="Submit for grading").click()
        assert wait_for_result(page) == "missing-zero-grad"
        panel = page.locator("#live-result")
        hints = panel.get_by_role("region", name="Hints for Gradients not cleared before backward")
        # The levels opened after earlier attempts are open here too; no later one is shown.
        expect(hints.locator("li[id^=hint-]")).to_have_count(attempt - 1)
        hints.get_by_role("button", name=f"Show a hint ({attempt} of 3)").click()
        expect(hints.locator(f"#hint-{attempt}")).to_contain_text(HINT_WORDS[attempt - 1])
        expect(hints.locator("li[id^=hint-]")).to_have_count(attempt)
        if attempt < 3:
            following = hints.get_by_role("button", name=f"Show a hint ({attempt + 1} of 3)")
            expect(following).to_be_disabled()
            expect(hints).to_contain_text("Opens after 1 more attempt with this diagnosis")
            # Sent anyway (the button enabled by hand): the server refuses it, nothing opens.
            following.evaluate("button => { button.disabled = false; }")
            following.click()
            expect(panel.locator("#hints .form-error")).to_contain_text(
                "Not opened: the next hint opens after 1 more attempt with this diagnosis."
            )
            expect(panel.locator(f"#hint-{attempt + 1}")).to_have_count(0)
        else:
            expect(hints.get_by_role("button")).to_have_count(0)
            expect(hints).to_contain_text("That is every hint this course shows")
        assert_fix_drawn(page, panel.locator("#result"))
        assert_titles_fit(page)
        assert_accessible_basics(page)
        screenshot(page, f"desktop-issue33-attempt-{attempt}")
        href = panel.get_by_role("link", name="This result on its own page").get_attribute("href")
        assert href is not None and href != latest
        latest = href

    teacher.goto(f"/courses/{course_id}/exercises/{EXERCISE}/stats")
    # Each level opened once; the two refused sends opened nothing.
    opened = teacher.get_by_role("region", name="Hints opened").locator("tbody tr")
    assert [r.split("\t") for r in opened.all_inner_texts()] == [
        ["Gradients not cleared before backward", "1", "1", "1"]
    ]
    assert_accessible_basics(teacher)
    teacher.get_by_role("link", name="Misconception map and item analysis").click()
    expect(teacher.get_by_role("heading", level=1)).to_contain_text("misconception map")
    stays = teacher.get_by_role("region", name="Stays")
    expect(stays.get_by_role("link", name="Gradients not cleared before backward")).to_be_visible()
    stuck = teacher.get_by_role("region", name="Stuck learners, by name")
    expect(stuck.locator("tbody tr")).to_have_count(1)
    expect(stuck).to_contain_text(LEARNER_NAME)
    expect(stuck).to_contain_text("3 times in a row")
    # The name's last submission; an extension and a mail are links of their own beside it.
    link = stuck.get_by_role("link", name="Gradients not cleared before backward, ", exact=False)
    expect(stuck.get_by_role("link", name=f"Give an extension to {LEARNER_NAME}")).to_be_visible()
    expect(link).to_contain_text("Gradients not cleared before backward")
    expect(link).to_have_attribute("href", latest)
    moves = teacher.get_by_role("region", name="Moves")
    assert [r.split("\t") for r in moves.locator("tbody tr").all_inner_texts()] == [
        [
            "Gradients not cleared before backward",
            "Gradients not cleared before backward",
            "2",
            "1",
        ],
        ["Start", "Gradients not cleared before backward", "1", "1"],
    ]
    assert_titles_fit(teacher)
    assert_accessible_basics(teacher)
    screenshot(teacher, "desktop-issue33-map")

    with teacher.expect_download() as download:
        teacher.get_by_role("link", name="Stuck", exact=True).click()
    saved = tmp_path / "stuck.csv"
    download.value.save_as(saved)
    rows = list(csv.DictReader(io.StringIO(saved.read_text(encoding="utf-8"))))
    assert [(r["learner"], r["email"], r["latest_diagnosis"]) for r in rows] == [
        (LEARNER_NAME, LEARNER, "missing-zero-grad")
    ]
    assert f"/submissions/{rows[0]['submission']}" == latest

    link.click()
    expect(teacher.get_by_role("heading", level=1)).to_have_text(f"Submission by {LEARNER_NAME}")
    expect(teacher.locator(".your-code")).to_contain_text("optimizer.step()")
    assert "zero_grad" not in (teacher.locator(".your-code").text_content() or "")
    assert_accessible_basics(teacher)
