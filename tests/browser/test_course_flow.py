"""The whole path in Chromium: an instructor and a course made with the CLI; a learner signs up
with the join code, submits a buggy then a fixed loop and sees both results and the history;
the instructor reads the gradebook and the statistics, exports the CSV, overrides a score and
regrades. Screenshots at desktop and phone widths land in build/screenshots."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from app.settings import Settings
from graders.exercises import list_exercises
from tests.app.conftest import (
    CORRECT_CODE,
    GRADING_TIMEOUT_SECONDS,
    MISSING_ZERO_GRAD_CODE,
    loopgrade,
)
from tests.browser.conftest import assert_accessible_basics, new_page, screenshot

TEACHER, TEACHER_PASSWORD = "tess@example.edu", "teach me a lesson"
LEARNER, LEARNER_PASSWORD = "lee@example.edu", "learning loops 42"
GRADING_MS = GRADING_TIMEOUT_SECONDS * 1000


def wait_for_result(page: Page) -> str:
    """Wait until the result is graded; return the code of the diagnosis shown."""
    expect(page.locator("#result .score-value")).to_be_visible(timeout=GRADING_MS)
    return page.locator("#result .diagnosis").get_attribute("data-code") or ""


def set_code(page: Page, code: str) -> None:
    page.wait_for_function("() => window.loopgradeEditor")
    page.evaluate("code => window.loopgradeEditor.setValue(code)", code)


def code_in_editor(page: Page) -> str:
    code: str = page.evaluate("() => window.loopgradeEditor.getValue()")
    return code


def gradebook_rows(page: Page) -> list[list[str]]:
    rows = []
    for row in page.locator("table.gradebook tbody tr").all():
        name = row.locator("th").evaluate("th => th.firstChild.textContent.trim()")
        scores = [
            cell.evaluate("td => (td.querySelector('a, strong, .hint') || td).textContent.trim()")
            for cell in row.locator("td").all()
        ]
        rows.append([name, *scores])
    return rows


def test_learner_and_instructor_through_the_course(
    browser: Browser, base_url: str, server_settings: Settings
) -> None:
    data_dir = server_settings.data_dir
    # The server's database, not this test's (LOOPGRADE_DATABASE_URL on PostgreSQL).
    server_database = {"LOOPGRADE_DATABASE_URL": server_settings.database_url}
    made = loopgrade(
        "users",
        "create",
        TEACHER,
        "--role",
        "instructor",
        "--name",
        "Tess Teacher",
        data_dir=data_dir,
        env={**server_database, "LOOPGRADE_PASSWORD": TEACHER_PASSWORD},
    )
    assert made.returncode == 0, made.stderr
    course = loopgrade(
        "courses",
        "create",
        "Deep Learning 101",
        "--instructor",
        TEACHER,
        data_dir=data_dir,
        env=server_database,
    )
    assert course.returncode == 0, course.stderr
    join_code = course.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"[A-Z2-9]{8}", join_code)

    # The learner signs up with the join code and lands in the course.
    learner = new_page(browser, base_url)
    learner.goto(f"/sign-up?code={join_code}")
    assert_accessible_basics(learner)
    learner.get_by_label("Your name").fill("Lee Learner")
    learner.get_by_label("Email").fill(LEARNER)
    learner.get_by_label("Password").fill(LEARNER_PASSWORD)
    expect(learner.get_by_label("Course join code")).to_have_value(join_code)
    learner.get_by_role("button", name="Create account").click()
    expect(learner.get_by_role("heading", level=1)).to_have_text("Deep Learning 101")
    course_url = learner.url
    expect(learner.locator(".state-not-tried")).to_have_count(len(list_exercises()))
    assert_accessible_basics(learner)
    screenshot(learner, "desktop-course-home")

    # The exercise: rendered prompt, an editor with line numbers and highlighting.
    learner.get_by_role("link", name=re.compile("One training step")).first.click()
    editor = learner.get_by_role("textbox", name=re.compile("Your code"))
    expect(editor).to_be_visible()
    expect(learner.locator(".cm-gutters")).to_contain_text("1")
    expect(learner.locator(".cm-content .tok-keyword").first).to_have_text("def")
    expect(learner.locator("#rate-limit")).to_contain_text("10 submissions per minute")
    assert_accessible_basics(learner)
    screenshot(learner, "desktop-exercise")

    # Keyboard: Tab indents inside the editor; Esc then Tab leaves it.
    set_code(learner, "")
    editor.press("Tab")
    assert code_in_editor(learner) == "    "
    editor.press("Escape")
    editor.press("Tab")
    assert learner.evaluate("document.activeElement.id") != "code"

    # A buggy loop first: the result appears on the exercise page, the code stays.
    set_code(learner, MISSING_ZERO_GRAD_CODE)
    learner.get_by_role("button", name="Submit for grading").click()
    expect(learner.locator("#result")).to_be_visible()
    assert wait_for_result(learner) == "missing-zero-grad"
    assert code_in_editor(learner) == MISSING_ZERO_GRAD_CODE
    own_page = learner.get_by_role("link", name="This result on its own page")
    buggy_url = base_url + (own_page.get_attribute("href") or "")
    learner.goto(buggy_url)
    assert wait_for_result(learner) == "missing-zero-grad"
    expect(learner.locator("#result .feedback")).to_contain_text("zero_grad")
    expect(learner.locator("#result svg.chart").first).to_be_visible()
    expect(learner.locator("#result tr.failed").first).to_be_visible()
    assert_accessible_basics(learner)
    screenshot(learner, "desktop-result-buggy")

    # Then fixed, from the resubmit link (the editor starts with the buggy code).
    learner.get_by_role("link", name="Edit this code and submit again").click()
    learner.wait_for_function("() => window.loopgradeEditor")
    assert "loss.backward()" in code_in_editor(learner)
    set_code(learner, CORRECT_CODE)
    learner.get_by_role("button", name="Submit for grading").click()
    assert wait_for_result(learner) == "correct"
    expect(learner.locator("#result .score-value")).to_have_text("10 / 10")
    screenshot(learner, "desktop-result-correct")

    # The history: both, newest first, each opening its result.
    learner.goto(course_url)
    expect(learner.locator(".state-solved")).to_have_count(1)
    learner.get_by_role("link", name="All your submissions in this course").click()
    rows = learner.locator("table.history tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("Correct")
    expect(rows.nth(1)).to_contain_text("Gradients not cleared before backward")
    assert_accessible_basics(learner)
    screenshot(learner, "desktop-history")
    # The learner cannot open the gradebook.
    denied = learner.goto(course_url + "/gradebook")
    assert denied is not None and denied.status == 403

    # The instructor signs in and reads the gradebook.
    teacher = new_page(browser, base_url)
    teacher.goto(course_url + "/gradebook")
    expect(teacher).to_have_url(re.compile(r"/sign-in\?next="))
    teacher.get_by_label("Email").fill(TEACHER)
    teacher.get_by_label("Password").fill(TEACHER_PASSWORD)
    teacher.get_by_role("button", name="Sign in").click()
    expect(teacher.get_by_role("heading", level=1)).to_have_text("Gradebook")
    # One column per exercise: only train-step was solved.
    scores = ["10" if e.id == "train-step" else "—" for e in list_exercises()]
    assert gradebook_rows(teacher) == [["Lee Learner", *scores, "10"]]
    teacher.get_by_role("link", name=re.compile("^Total")).click()
    expect(teacher.locator('th[aria-sort="descending"]')).to_contain_text("Total")
    teacher.get_by_label("Learner").fill("lee")
    teacher.get_by_role("button", name="Apply").click()
    expect(teacher.locator("table.gradebook tbody tr")).to_have_count(1)
    assert_accessible_basics(teacher)
    screenshot(teacher, "desktop-gradebook")

    # The CSV is exactly what is shown.
    with teacher.expect_download() as download:
        teacher.get_by_role("link", name=re.compile("Export CSV")).click()
    exported = list(csv.reader(Path(download.value.path()).read_text().splitlines()))
    shown = gradebook_rows(teacher)
    assert [row[0] for row in exported[1:]] == [row[0] for row in shown]
    # Each exercise's counted score, the totals, then why each counts that (new columns last:
    # an importer reading by position keeps working).
    exercises = list_exercises()
    scores = ["10" if e.id == "train-step" else "" for e in exercises]
    why = ["graded" if e.id == "train-step" else "" for e in exercises]
    total = ["10", f"{sum(e.max_score for e in exercises):g}"]
    assert exported[1][2:] == [*scores, *total, *why]

    # The statistics: who tried, who solved, what went wrong.
    teacher.get_by_role("link", name="One training step: zero, backward, step").last.click()
    expect(teacher.get_by_role("heading", level=1)).to_contain_text("One training step")
    expect(teacher.locator(".figures")).to_contain_text("100%")
    expect(teacher.locator("svg.bar-chart").first).to_contain_text(
        "Gradients not cleared before backward"
    )
    assert_accessible_basics(teacher)
    screenshot(teacher, "desktop-statistics")

    # Override the buggy submission's score, with a reason.
    teacher.goto(buggy_url)
    expect(teacher.get_by_role("heading", level=2, name="Instructor")).to_be_visible()
    teacher.get_by_label(re.compile("^Score")).fill("6")
    teacher.get_by_label("Reason").fill("Explained the fix in the lab")
    teacher.get_by_role("button", name="Set override").click()
    # Lee solved it since: an override of the older attempt never lowers that solve.
    expect(teacher.locator(".confirm-override")).to_contain_text(
        "This does not change the counted score: a better attempt counts (10)."
    )
    teacher.get_by_role("button", name="Confirm override").click()
    expect(teacher.locator(".notice")).to_contain_text("Override set")
    assert_accessible_basics(teacher)
    screenshot(teacher, "desktop-submission-instructor")
    teacher.goto(course_url + "/gradebook")
    expect(teacher.locator("table.gradebook tbody tr").first).not_to_contain_text("override")
    assert gradebook_rows(teacher)[0][3] == "10"

    # Regrade every submission of the exercise, watching the progress.
    teacher.goto(course_url + "/exercises/train-step/stats")
    teacher.get_by_role("link", name="Regrade all…").click()
    expect(teacher.locator(".lede")).to_contain_text("This will grade 2 submissions by 1 learner")
    assert_accessible_basics(teacher)
    teacher.get_by_label("The grader was corrected").check()
    teacher.get_by_role("button", name="Regrade 2 submissions").click()
    expect(teacher.locator("#result .status")).to_contain_text(
        "2 of 2 regraded: done", timeout=2 * GRADING_MS
    )
    expect(teacher.locator("#result progress")).to_have_attribute("value", "2")
    screenshot(teacher, "desktop-regrade")
    teacher.goto(course_url + "/settings")
    expect(teacher.locator(".join-code-big")).to_have_text(join_code)
    assert_accessible_basics(teacher)
    screenshot(teacher, "desktop-settings")
    teacher.goto(course_url + "/audit")
    expect(teacher.locator(".audit-log")).to_contain_text("Tess Teacher overrode Lee Learner's")
    expect(teacher.locator(".audit-log")).to_contain_text("had 2 submissions of")
    assert_accessible_basics(teacher)

    # On a phone: the same pages fit the width.
    phone = new_page(browser, base_url, phone=True)
    phone.goto("/sign-in")
    phone.get_by_label("Email").fill(LEARNER)
    phone.get_by_label("Password").fill(LEARNER_PASSWORD)
    phone.get_by_role("button", name="Sign in").click()
    for name, url in (
        ("phone-home", "/"),
        ("phone-course-home", course_url),
        ("phone-exercise", course_url + "/exercises/train-step"),
        ("phone-result", buggy_url),
        ("phone-history", "/history"),
    ):
        phone.goto(url)
        assert_accessible_basics(phone)
        screenshot(phone, name)
    teacher_phone = new_page(browser, base_url, phone=True)
    teacher_phone.goto("/sign-in?next=" + course_url.split(base_url, 1)[1] + "/gradebook")
    teacher_phone.get_by_label("Email").fill(TEACHER)
    teacher_phone.get_by_label("Password").fill(TEACHER_PASSWORD)
    teacher_phone.get_by_role("button", name="Sign in").click()
    expect(teacher_phone.get_by_role("heading", level=1)).to_have_text("Gradebook")
    assert_accessible_basics(teacher_phone)
    screenshot(teacher_phone, "phone-gradebook")
    teacher_phone.goto(course_url + "/exercises/train-step/stats")
    assert_accessible_basics(teacher_phone)
    screenshot(teacher_phone, "phone-statistics")
    teacher_phone.goto(buggy_url)
    assert_accessible_basics(teacher_phone)
    screenshot(teacher_phone, "phone-submission-instructor")
