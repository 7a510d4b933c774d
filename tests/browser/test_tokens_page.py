"""The personal access tokens page, /account/tokens, in Chromium on a desktop and a phone:
create a named token (shown once, copyable, never again), see it listed with its expiry and
last use, revoke it; accessible, and nothing wider than a phone's screen."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Browser, expect

from app.db import SessionFactory
from tests.app.people import PASSWORD, make_user
from tests.browser.conftest import assert_accessible_basics, screenshot, signed_in_page


@pytest.mark.parametrize("phone", [False, True], ids=["desktop", "phone"])
def test_a_learner_creates_lists_and_revokes_a_token(
    browser: Browser, base_url: str, module_sessions: SessionFactory, phone: bool
) -> None:
    email = f"tokens-{'phone' if phone else 'desktop'}@example.edu"
    make_user(module_sessions, email)
    page = signed_in_page(browser, base_url, email, PASSWORD, phone=phone)
    page.goto("/account/tokens")
    expect(page.get_by_text("No tokens yet.")).to_be_visible()
    assert_accessible_basics(page)

    page.get_by_label("Name").fill("my laptop")
    page.get_by_label("Expires after").select_option("90")
    page.get_by_label("Your password").fill(PASSWORD)
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("[data-new-token]").inner_text()
    assert secret.startswith("lgp_")
    expect(page.get_by_text("Copy it now: it is not shown again.")).to_be_visible()
    expect(page.get_by_text(f"loopgrade-client login {base_url}")).to_be_visible()
    assert_accessible_basics(page)  # the long token wraps on a phone
    screenshot(page, f"tokens-created-{'phone' if phone else 'desktop'}")

    used = httpx.get(
        f"{base_url}/api/v1/me/exercises", headers={"Authorization": f"Bearer {secret}"}
    )
    assert used.status_code == 200
    page.goto("/account/tokens")
    row = page.locator("tr[data-state=live]")
    expect(row).to_contain_text("my laptop")
    expect(row).not_to_contain_text("never")  # its use is recorded
    assert secret not in page.content()

    row.get_by_role("button", name="Revoke my laptop").click()
    expect(page.locator("tr[data-state=revoked]")).to_contain_text("revoked")
    refused = httpx.get(
        f"{base_url}/api/v1/me/exercises", headers={"Authorization": f"Bearer {secret}"}
    )
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]
    page.context.close()
