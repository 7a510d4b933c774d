"""The instructor's pages and the errors people meet, in Chromium, on a desktop and a phone:
one settings form that keeps every section's change, the regrade confirmation with its count,
the counted score after an override, the diagnosis list and "next submission", the audit log
as sentences, tables as cards on a phone, the 404 page, sign-up with an unknown join code, an
ended session. Graded rows are written as a worker leaves them: no grading runs here."""

from __future__ import annotations

import contextlib
import re
from datetime import timedelta

import pytest
from playwright.sync_api import Browser, Dialog, FrameLocator, Page, expect
from playwright.sync_api import Error as PlaywrightError
from sqlalchemy import update

from app.db import SessionFactory
from app.models import SiteRole, WebSession, utc_now
from tests.app.conftest import EXERCISE
from tests.app.people import PASSWORD, graded, make_course, make_user
from tests.browser.conftest import (
    PHONE,
    assert_accessible_basics,
    assert_no_axe_violations,
    framing_lms,
    new_page,
    screenshot,
    signed_in_page,
)

TEACHER = "tess@example.edu"


@pytest.fixture(scope="module")
def course(module_sessions: SessionFactory) -> dict[str, str]:
    make_user(module_sessions, TEACHER, SiteRole.INSTRUCTOR, name="Tess Teacher")
    alice = make_user(module_sessions, "alice@example.edu", name="Alice Adams")
    bob = make_user(module_sessions, "bob@example.edu", name="Bob Brown")
    course_id = make_course(module_sessions, TEACHER, "alice@example.edu", "bob@example.edu")
    start = utc_now() - timedelta(hours=2)
    ids = {}
    for minute, (user, score, diagnosis) in enumerate(
        [
            (alice, 4.0, "missing-zero-grad"),
            (bob, 4.0, "missing-zero-grad"),
            (alice, 10.0, "correct"),
            (bob, 0.0, "step-before-backward"),
            (bob, 4.0, "missing-zero-grad"),
        ]
    ):
        ids[f"s{minute}"] = graded(
            module_sessions,
            user_id=user,
            course_id=course_id,
            score=score,
            diagnosis=diagnosis,
            created_at=start + timedelta(minutes=minute),
        )
    return {"course": course_id, **ids}


def signed_in(browser: Browser, base_url: str, email: str = TEACHER, **options: bool) -> Page:
    page = signed_in_page(browser, base_url, email, PASSWORD, **options)
    expect(page.get_by_role("heading", level=1)).to_have_text("Your courses")
    return page


def test_settings_one_form_keeps_every_section(
    browser: Browser, base_url: str, course: dict[str, str]
) -> None:
    page = signed_in(browser, base_url)
    page.goto(f"/courses/{course['course']}/settings")
    assert_accessible_basics(page)
    # A change in two exercises and an error in another section: nothing is lost.
    page.get_by_label("Due").first.fill("2026-12-24T18:00")
    page.locator("#scoring-fix-the-loop").select_option("latest")
    page.locator("#penalty-train-step").fill("10")
    page.get_by_label(re.compile("Add an instructor")).fill("nobody@example.edu")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".form-error").first).to_contain_text("Nothing was saved")
    expect(page.get_by_label("Due").first).to_have_value("2026-12-24T18:00")
    expect(page.locator("#scoring-fix-the-loop")).to_have_value("latest")
    expect(page.locator("#penalty-train-step")).to_have_value("10")
    expect(page.locator(".form-error").first).to_contain_text("they need to sign up")
    assert_accessible_basics(page)
    screenshot(page, "desktop-settings-error")
    page.get_by_label(re.compile("Add an instructor")).fill("")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".notice")).to_contain_text("Settings saved. Changed:")
    expect(page.locator(".notice")).to_contain_text("Fix the loop")
    expect(page.locator("#scoring-fix-the-loop")).to_have_value("latest")
    expect(page.locator("#penalty-train-step")).to_have_value("10")
    expect(page.get_by_label("Due").first).to_have_value("2026-12-24T18:00")  # in this zone
    screenshot(page, "desktop-settings-saved")


def leaving_asks(page: Page) -> bool:
    """Whether leaving the page now asks first (a beforeunload dialog), staying if it does."""
    asked: list[str] = []

    def stay(dialog: Dialog) -> None:
        asked.append(dialog.type)
        dialog.dismiss()

    page.once("dialog", stay)
    with contextlib.suppress(PlaywrightError):  # a dismissed dialog cancels the navigation
        page.goto("/", timeout=5_000)
    if not asked:
        page.remove_listener("dialog", stay)
    return asked == ["beforeunload"]


def test_settings_ask_before_changes_are_left_unsaved(
    browser: Browser, base_url: str, course: dict[str, str]
) -> None:
    page = signed_in(browser, base_url)
    settings = f"/courses/{course['course']}/settings"
    page.goto(settings)
    page.wait_for_load_state("load")
    assert not leaving_asks(page), "nothing changed, yet leaving asked"
    page.goto(settings)
    page.wait_for_load_state("load")
    page.locator("#penalty-train-step").fill("15")
    assert leaving_asks(page), "a changed field was left without a question"
    expect(page).to_have_url(re.compile("/settings$"))
    # Saving is not leaving; the saved page has nothing unsaved.
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".notice")).to_contain_text("Settings saved")
    page.wait_for_load_state("load")
    assert not leaving_asks(page), "the saved settings asked before leaving"
    # Sent back refused: what it shows was not saved, changed since or not.
    page.goto(settings)
    page.get_by_label(re.compile("Add an instructor")).fill("nobody@example.edu")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".form-error").first).to_contain_text("Nothing was saved")
    page.wait_for_load_state("load")
    assert leaving_asks(page), "a refused form was left without a question"


def test_regrade_override_review_and_audit(
    browser: Browser, base_url: str, course: dict[str, str]
) -> None:
    page = signed_in(browser, base_url)
    course_url = f"/courses/{course['course']}"
    page.goto(f"{course_url}/exercises/{EXERCISE}/stats")
    assert_accessible_basics(page)
    page.get_by_role("link", name="Regrade all…").click()
    expect(page.locator(".lede")).to_have_text(
        re.compile(r"This will grade 5 submissions\s+by 2 learners again")
    )
    expect(page.get_by_role("button", name="Regrade 5 submissions")).to_be_visible()
    assert_accessible_basics(page)
    screenshot(page, "desktop-regrade-confirm")
    page.get_by_role("link", name="Cancel").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("One training step")

    # The diagnosis filter: names and counts; then through the list with "Next submission".
    page.goto(f"{course_url}/submissions?exercise={EXERCISE}")
    diagnosis = page.get_by_label("Diagnosis")
    expect(diagnosis.locator("option")).to_have_text(
        [
            "Any",
            "Gradients not cleared before backward (3)",
            "Correct (1)",
            "Step before backward (1)",
        ]
    )
    diagnosis.select_option("missing-zero-grad")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("table tbody tr")).to_have_count(3)
    assert_accessible_basics(page)
    screenshot(page, "desktop-course-submissions")
    page.locator("table tbody tr").first.get_by_role("link").click()
    nav = page.get_by_role("navigation", name="Submissions in the list")
    expect(nav).to_contain_text("Submission 1 of 3")
    nav.get_by_role("link", name="Next submission →").click()
    expect(nav).to_contain_text("Submission 2 of 3")
    expect(page.get_by_role("heading", level=1)).to_have_text("Submission by Bob Brown")

    # Override: the big score is the counted one, the graded one beside it.
    page.get_by_label(re.compile("^Score")).fill("7")
    page.get_by_label("Reason").fill("Explained the fix in the lab")
    page.get_by_role("button", name="Set override").click()
    expect(page.locator(".confirm-override")).to_contain_text(
        "This changes the counted score from 4 to 7."
    )
    page.get_by_role("button", name="Confirm override").click()
    expect(page.locator("#result .score-value")).to_have_text("7 / 10")
    expect(page.locator("#result .graded-score")).to_contain_text("graded 4 / 10")
    expect(nav).to_contain_text("Submission 2 of 3")  # still in the list
    assert_accessible_basics(page)
    screenshot(page, "desktop-submission-override")

    # Removing it says what it does to the counted score first; cancelled, it stays.
    page.get_by_role("button", name="Remove override…").click()
    expect(page.locator(".confirm-override")).to_contain_text(
        "This changes the counted score from 7 to 4."
    )
    expect(page.get_by_role("button", name="Confirm removal")).to_be_visible()
    assert_accessible_basics(page)
    page.locator(".confirm-override").get_by_role("link", name="Cancel").click()
    expect(page.locator("#result .score-value")).to_have_text("7 / 10")
    expect(nav).to_contain_text("Submission 2 of 3")

    page.goto(f"{course_url}/audit")
    expect(page.locator(".audit-log li").first).to_contain_text(
        "Tess Teacher overrode Bob Brown's One training step: zero, backward, step score "
        "4 → 7: “Explained the fix in the lab”; counted score 4 → 7."
    )
    assert_accessible_basics(page)
    screenshot(page, "desktop-audit")


def test_instructor_pages_on_a_phone(
    browser: Browser, base_url: str, course: dict[str, str]
) -> None:
    page = signed_in(browser, base_url, phone=True)
    course_url = f"/courses/{course['course']}"
    for name, url in (
        ("phone-gradebook-cards", f"{course_url}/gradebook"),
        ("phone-course-submissions", f"{course_url}/submissions"),
        ("phone-statistics-cards", f"{course_url}/exercises/{EXERCISE}/stats"),
        ("phone-settings", f"{course_url}/settings"),
        ("phone-audit", f"{course_url}/audit"),
        ("phone-submission-review", f"/submissions/{course['s1']}"),
    ):
        page.goto(url)
        box = page.get_by_role("heading", level=1).bounding_box()
        assert box is not None and box["y"] < PHONE["height"] / 3, (url, box)
        assert_accessible_basics(page)  # includes: nothing wider than the viewport
        screenshot(page, name)
    # Cards: a learner's scores are all on the screen, labelled by exercise.
    page.goto(f"{course_url}/gradebook")
    total = page.locator("table.gradebook tbody tr").first.locator('td[data-label="Total"]')
    expect(total).to_be_visible()
    total_box = total.bounding_box()
    assert total_box is not None and total_box["x"] + total_box["width"] <= PHONE["width"]


def test_instructor_pages_framed_by_an_lms(
    browser: Browser, base_url: str, course: dict[str, str], module_sessions: SessionFactory
) -> None:
    """Inside the LMS's frame (900 px wide), every instructor page is shown (not refused by
    frame-ancestors, not the sign-in page), accessible, and no wider than the frame."""
    page = signed_in(browser, base_url)
    course_url = f"/courses/{course['course']}"
    with framing_lms(base_url, module_sessions) as lms_origin:
        for name, url, heading in (
            ("framed-gradebook", f"{course_url}/gradebook", "Gradebook"),
            ("framed-course-submissions", f"{course_url}/submissions", "All submissions"),
            ("framed-statistics", f"{course_url}/exercises/{EXERCISE}/stats", "One training"),
            ("framed-settings", f"{course_url}/settings", "Course settings"),
            ("framed-audit", f"{course_url}/audit", "Audit log"),
            ("framed-submission-review", f"/submissions/{course['s1']}", "Submission by"),
        ):
            page.goto(f"{lms_origin}/frame?src={url}")
            frame = page.frame_locator("iframe")
            expect(frame.get_by_role("heading", level=1)).to_contain_text(heading)
            inner = page.frames[1]
            assert inner.url == base_url + url
            assert_no_axe_violations(inner)
            assert inner.evaluate("document.documentElement.scrollWidth <= innerWidth"), url
            screenshot(page, name)


STAFF_LAYOUTS = ["desktop", "phone", "framed"]


@pytest.mark.parametrize("layout", STAFF_LAYOUTS)
def test_course_staff_changed_on_the_settings_page(
    browser: Browser,
    base_url: str,
    module_sessions: SessionFactory,
    course: dict[str, str],  # its teacher teaches this course too
    layout: str,
) -> None:
    """Another instructor made a learner, then (an instructor again) removed; the last one
    cannot be removed, and a stale page that tries is told so."""
    colleague = f"ivy-{layout}@example.edu"
    make_user(module_sessions, colleague, name=f"Ivy {layout.title()}")
    settings = f"/courses/{make_course(module_sessions, TEACHER)}/settings"
    page = signed_in(browser, base_url, phone=layout == "phone")
    side = signed_in(browser, base_url)  # the same teacher, in a second browser
    with contextlib.ExitStack() as stack:
        if layout == "framed":
            lms_origin = stack.enter_context(framing_lms(base_url, module_sessions))
            page.goto(f"{lms_origin}/frame?src={settings}")
            root: Page | FrameLocator = page.frame_locator("iframe")
        else:
            page.goto(settings)
            root = page
        staff = root.locator("ul.staff")

        def add_colleague() -> None:
            root.get_by_label(re.compile("Add an instructor")).fill(colleague)
            root.get_by_role("button", name="Save settings").click()
            expect(root.locator(".notice")).to_have_text("Settings saved.")
            expect(staff).to_contain_text(colleague)

        def change(email: str, button: str) -> None:
            row = staff.locator("li").filter(has_text=email)
            row.get_by_role("button", name=button).click()

        add_colleague()
        change(colleague, "Make a learner")
        expect(root.locator(".notice")).to_have_text("The course's staff is changed.")
        expect(staff).not_to_contain_text(colleague)
        expect(root.locator(".join-code-big + p")).to_contain_text("1 learner enrolled")

        add_colleague()
        expect(root.locator(".join-code-big + p")).to_contain_text("0 learners enrolled")
        change(colleague, "Remove from the course")
        expect(root.locator(".notice")).to_have_text("The course's staff is changed.")
        expect(staff).not_to_contain_text(colleague)
        expect(root.locator(".join-code-big + p")).to_contain_text("0 learners enrolled")
        # The last instructor: no button takes them out, and the page says why.
        expect(staff.get_by_role("button")).to_have_count(0)
        expect(root.locator("#last-instructor")).to_have_text(
            "A course keeps at least one instructor: add another before you step down."
        )

        # A page shown while there were two: the other is removed elsewhere, then this one
        # tries to remove its own teacher, now the last.
        add_colleague()
        side.goto(settings)
        change_on_side = side.locator("ul.staff li").filter(has_text=colleague)
        change_on_side.get_by_role("button", name="Remove from the course").click()
        expect(side.locator(".notice")).to_have_text("The course's staff is changed.")
        change(TEACHER, "Remove from the course")
        expect(root.locator("#staff-error")).to_have_text(
            f"The course's only instructor is {TEACHER}: add another instructor first."
        )
        expect(root.locator("#last-instructor")).to_be_visible()
        if layout == "framed":
            inner = page.frames[1]
            assert_no_axe_violations(inner)
            assert inner.evaluate("document.documentElement.scrollWidth <= innerWidth")
        else:
            assert_accessible_basics(page)
            # Only the staff change was refused: the settings hold nothing unsaved.
            assert not leaving_asks(page), "a refused staff change asked before leaving"
        screenshot(page, f"{layout}-settings-staff-refused")
    side.context.close()
    page.context.close()


def test_errors_people_meet(
    browser: Browser, base_url: str, module_sessions: SessionFactory
) -> None:
    page = new_page(browser, base_url)
    missing = page.goto("/no/such/page")
    assert missing is not None and missing.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Not Found")
    expect(page.locator("main")).to_contain_text("There is no page at this address")
    assert_accessible_basics(page)
    screenshot(page, "desktop-404")
    api = page.request.get("/api/v1/no-such-thing")
    assert api.status == 404 and api.json() == {"detail": "Not Found"}

    # Sign-up with a join code that matches no course: the account is made anyway.
    page.goto("/sign-up?code=NOPE2345")
    page.get_by_label("Your name").fill("Cy Cole")
    page.get_by_label("Email").fill("cy@example.edu")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Your courses")
    expect(page.locator("#join-error")).to_contain_text(
        "Your account is ready, but no course has the join code “NOPE2345”"
    )
    expect(page.get_by_label("Join a course with its code")).to_have_value("NOPE2345")
    assert_accessible_basics(page)
    screenshot(page, "desktop-sign-up-unknown-code")

    # The session ends (here: expires): the sign-in page says so.
    with module_sessions.begin() as session:
        session.execute(update(WebSession).values(expires_at=utc_now() - timedelta(seconds=1)))
    page.goto("/courses/any-course")  # a page that needs a signed-in user
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    expect(page.locator("#ended-notice")).to_contain_text("Your session has ended")
    assert_accessible_basics(page)
    screenshot(page, "desktop-session-ended")
