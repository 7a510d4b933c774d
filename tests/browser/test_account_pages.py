"""In Chromium, desktop and phone, and framed by another origin: a forgotten password reset by
the link the server logs (its mail back-end with no SMTP host), and the account page."""

from __future__ import annotations

import logging
import re
import time

import pytest
from playwright.sync_api import Browser, Page, expect

from app.db import SessionFactory
from tests.app.people import PASSWORD, make_user
from tests.browser.conftest import (
    assert_accessible_basics,
    assert_no_axe_violations,
    framing_lms,
    new_page,
    screenshot,
    signed_in_page,
)
from tests.servers import HTTP_TIMEOUT_SECONDS

NEW_PASSWORD = "the new long password"
_LINK = re.compile(r"http://\S+(/reset-password\?token=\S+)")


def mailed_path(caplog: pytest.LogCaptureFixture, email: str) -> str:
    """The path of the reset link last written to the log for `email` (mail goes out after the
    answer: waited for)."""
    deadline = time.monotonic() + HTTP_TIMEOUT_SECONDS
    while True:
        for record in reversed(caplog.records):
            text = record.getMessage()
            link = _LINK.search(text)
            if record.name == "loopgrade.mail" and f"To: {email}" in text and link:
                return link[1]
        assert time.monotonic() < deadline, "no reset mail in the log"
        time.sleep(0.05)


def new_account(sessions: SessionFactory, who: str, name: str, phone: bool) -> str:
    """A learner of this test's own (one per layout); returns their email."""
    email = f"{who}-{'phone' if phone else 'desktop'}@example.org"
    make_user(sessions, email, name=name)
    return email


@pytest.mark.parametrize("phone", [False, True], ids=["desktop", "phone"])
def test_a_forgotten_password_is_reset_by_the_link(
    browser: Browser,
    base_url: str,
    module_sessions: SessionFactory,
    caplog: pytest.LogCaptureFixture,
    phone: bool,
) -> None:
    caplog.set_level(logging.WARNING, logger="loopgrade.mail")
    email = new_account(module_sessions, "forgetful", "Forgetful", phone)
    page = new_page(browser, base_url, phone=phone)
    page.goto("/sign-in")
    page.get_by_role("link", name="Forgot your password?").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Forgot your password?")
    assert_accessible_basics(page)
    page.get_by_label("Email").fill(email)
    page.get_by_role("button", name="Send me a link").click()
    expect(page.locator("#sent-notice")).to_contain_text(f"If an account has the email {email}")

    page.goto(mailed_path(caplog, email))
    expect(page.get_by_role("heading", level=1)).to_have_text("Choose a new password")
    assert_accessible_basics(page)
    page.get_by_label("New password").fill(NEW_PASSWORD)
    page.get_by_label("The same again").fill(NEW_PASSWORD + " typo")
    page.get_by_role("button", name="Set the password").click()
    expect(page.locator("#form-error")).to_contain_text("The two passwords differ")
    page.get_by_label("New password").fill(NEW_PASSWORD)
    page.get_by_label("The same again").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Set the password").click()
    page.wait_for_url(f"{base_url}/account?done=reset")
    expect(page.locator("#account-notice")).to_contain_text("Your new password is set")
    screenshot(page, f"account-after-reset-{'phone' if phone else 'desktop'}")
    page.context.close()

    # The new password signs in; the link does not work again.
    again = signed_in_page(browser, base_url, email, NEW_PASSWORD, phone=phone)
    again.goto(mailed_path(caplog, email))
    expect(again.get_by_role("heading", level=1)).to_have_text("This reset link does not work")
    again.context.close()


@pytest.mark.parametrize("phone", [False, True], ids=["desktop", "phone"])
def test_the_account_page(
    browser: Browser, base_url: str, module_sessions: SessionFactory, phone: bool
) -> None:
    email = new_account(module_sessions, "owner", "Owner", phone)
    other = signed_in_page(browser, base_url, email, PASSWORD)
    page = signed_in_page(browser, base_url, email, PASSWORD, phone=phone)
    if phone:
        page.get_by_text("Menu").click()
        page.locator(".menu-links").get_by_role("link", name="Owner").click()
    else:
        page.locator(".site-nav").get_by_role("link", name="Owner").click()
    page.wait_for_url(f"{base_url}/account")
    expect(page.get_by_role("heading", level=1)).to_have_text("Your account")
    expect(page.get_by_role("link", name="manage your personal tokens")).to_have_attribute(
        "href", "/account/tokens"
    )
    assert_accessible_basics(page)
    expect(page.locator("#sessions tbody tr")).to_have_count(2)

    page.get_by_label("Shown to your instructors").fill("Owner Renamed")
    page.get_by_role("button", name="Save the name").click()
    expect(page.locator("#account-notice")).to_have_text("Your name is changed.")
    expect(page.get_by_label("Shown to your instructors")).to_have_value("Owner Renamed")

    page.get_by_role("button", name="Sign out everywhere else").click()
    expect(page.locator("#account-notice")).to_have_text(
        "Every other browser is signed out, and your personal tokens are revoked."
    )
    expect(page.locator("#sessions tbody tr")).to_have_count(1)
    expect(page.locator("#sessions")).to_contain_text("(this browser)")
    other.goto("/account")
    expect(other.get_by_role("heading", level=1)).to_have_text("Sign in")

    page.get_by_label("Current password").fill("not the password")
    page.get_by_label("New password (at least").fill(NEW_PASSWORD)
    page.get_by_label("The new password again").fill(NEW_PASSWORD)
    page.get_by_role("button", name="Change the password").click()
    expect(page.locator("#password-error")).to_have_text("The current password is not right.")
    assert_accessible_basics(page)
    screenshot(page, f"account-{'phone' if phone else 'desktop'}")
    other.context.close()
    page.context.close()


def test_framed_by_another_origin(
    browser: Browser,
    base_url: str,
    module_sessions: SessionFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="loopgrade.mail")
    make_user(module_sessions, "framed@example.org", name="Framed")
    page: Page = signed_in_page(browser, base_url, "framed@example.org", PASSWORD)
    with framing_lms(base_url, module_sessions) as lms_origin:
        page.goto(f"{lms_origin}/frame?src=/account")
        frame = page.frame_locator("iframe")
        expect(frame.get_by_role("heading", level=1)).to_have_text("Your account")
        frame.get_by_label("Shown to your instructors").fill("Framed Renamed")
        frame.get_by_role("button", name="Save the name").click()
        expect(frame.locator("#account-notice")).to_have_text("Your name is changed.")
        inner = page.frames[1]
        assert_no_axe_violations(inner)
        assert inner.evaluate("document.documentElement.scrollWidth <= innerWidth")

        # The reset flow inside the frame, from a browser that is not signed in.
        visitor = new_page(browser, base_url)
        visitor.goto(f"{lms_origin}/frame?src=/forgot-password")
        frame = visitor.frame_locator("iframe")
        frame.get_by_label("Email").fill("framed@example.org")
        frame.get_by_role("button", name="Send me a link").click()
        expect(frame.locator("#sent-notice")).to_be_visible()
        visitor.goto(f"{lms_origin}/frame?src={mailed_path(caplog, 'framed@example.org')}")
        frame = visitor.frame_locator("iframe")
        frame.get_by_label("New password").fill(NEW_PASSWORD)
        frame.get_by_label("The same again").fill(NEW_PASSWORD)
        frame.get_by_role("button", name="Set the password").click()
        expect(frame.locator("#account-notice")).to_contain_text("Your new password is set")
        screenshot(visitor, "framed-account-after-reset")
        visitor.context.close()
    # The reset signed the first browser out.
    page.goto("/account")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    page.context.close()


@pytest.mark.parametrize("phone", [False, True], ids=["desktop", "phone"])
def test_a_learner_deletes_their_account(
    browser: Browser, base_url: str, module_sessions: SessionFactory, phone: bool
) -> None:
    email = new_account(module_sessions, "leaving", "Leaving", phone)
    page = signed_in_page(browser, base_url, email, PASSWORD, phone=phone)
    page.goto("/account")
    expect(page.locator("#delete-effects")).to_contain_text("It cannot be undone.")
    page.get_by_label("Your password").fill("not the password")
    page.get_by_label("I understand what deleting my account does").check()
    page.get_by_role("button", name="Delete my account").click()
    expect(page.locator("#delete-error")).to_have_text("The password is not right.")
    expect(page.get_by_label("Your password")).to_have_attribute("aria-describedby", "delete-error")
    assert_accessible_basics(page)
    screenshot(page, f"account-delete-refused-{'phone' if phone else 'desktop'}")

    page.get_by_label("Your password").fill(PASSWORD)
    page.get_by_label("I understand what deleting my account does").check()
    page.get_by_role("button", name="Delete my account").click()
    page.wait_for_url(f"{base_url}/")
    # Signed out: the account page asks for a sign-in, and the old password signs nobody in.
    page.goto("/account")
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#form-error")).to_be_visible()
    expect(page.get_by_role("heading", level=1)).to_have_text("Sign in")
    assert_accessible_basics(page)
    page.context.close()
