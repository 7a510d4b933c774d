"""LTI Platform Storage without a browser: the pages the tool answers, and the launch's
check of what its own page read back from the LMS page (the Chromium run is in
test_iframe.py)."""

from __future__ import annotations

import html
import re
from urllib.parse import urlencode

import httpx
import pytest
from sqlalchemy import select

from app.db import SessionFactory
from app.integrations.launch import LaunchCheck
from app.integrations.models import LtiLoginState
from tests.lti.conftest import form_fields
from tests.lti.fake_platform import FakePlatform
from tests.lti.test_launch import assert_refused, enter


def data_attributes(page: str) -> dict[str, str]:
    tag = re.search(r"<div data-lti-storage=[^>]*>", page)
    assert tag, page
    return {k: html.unescape(v) for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', tag[0])}


def storage_login(
    client: httpx.Client, platform: FakePlatform
) -> tuple[dict[str, str], dict[str, str]]:
    """Login with lti_storage_target: the tool's put page, then the platform's launch form."""
    platform.storage_target = "_parent"
    login = client.get(f"{platform.tool_url}/lti/login?{urlencode(platform.login_params())}")
    assert login.status_code == 200, login.text
    put = data_attributes(login.text)
    platform_form = client.get(put["next"])
    assert platform_form.status_code == 200, platform_form.text
    return put, form_fields(platform_form.text)


def test_the_login_puts_the_state_in_the_lms_page_and_the_launch_reads_it_back(
    browser_client: httpx.Client, platform: FakePlatform, sessions: SessionFactory
) -> None:
    put, launch_fields = storage_login(browser_client, platform)
    assert put["lti-storage"] == "put" and put["target"] == "_parent"
    assert put["origin"] == platform.url  # the platform's OIDC auth URL's origin
    assert put["key"] == f"state_{launch_fields['state']}" and len(put["value"]) >= 32
    # The platform's post answers the page that reads it back; the state is not used yet.
    tool = platform.tool_url
    reading = browser_client.post(f"{tool}/lti/launch", data=launch_fields)
    assert reading.status_code == 200
    get = data_attributes(reading.text)
    assert (get["lti-storage"], get["key"]) == ("get", put["key"])
    assert form_fields(reading.text)["state"] == launch_fields["state"]
    with sessions() as session:
        row = session.get(LtiLoginState, launch_fields["state"])
        assert row is not None and row.used_at is None and row.storage_target == "_parent"
    # That page posts again, from this origin, with what the LMS page held: signed in.
    launched = browser_client.post(
        f"{tool}/lti/launch",
        data={**launch_fields, "lti_storage_value": put["value"]},
        headers={"Origin": tool},
    )
    assert enter(browser_client, launched).url.path.endswith("/exercises/train-step")


@pytest.mark.parametrize(
    ("origin", "value", "problem"),
    [
        # Posted from another site with the right value (a forged launch).
        ("https://evil.example", "right", "did not come back through this tool's"),
        # From this tool's page, but the LMS page held no such value (another browser).
        (None, "wrong", "does not hold this login's state"),
    ],
)
def test_a_launch_the_lms_page_does_not_vouch_for_is_refused(
    browser_client: httpx.Client,
    platform: FakePlatform,
    sessions: SessionFactory,
    origin: str | None,
    value: str,
    problem: str,
) -> None:
    put, launch_fields = storage_login(browser_client, platform)
    stored = put["value"] if value == "right" else "not-the-value"
    refused = browser_client.post(
        f"{platform.tool_url}/lti/launch",
        data={**launch_fields, "lti_storage_value": stored},
        headers={"Origin": origin or platform.tool_url},
    )
    assert_refused(refused, LaunchCheck.PLATFORM_STORAGE)
    assert problem in html.unescape(refused.text)
    with sessions() as session:
        row = session.get(LtiLoginState, launch_fields["state"])
        assert row is not None and row.used_at is not None
    # The state was used by the refused try: the right one cannot follow it.
    again = browser_client.post(
        f"{platform.tool_url}/lti/launch",
        data={**launch_fields, "lti_storage_value": put["value"]},
        headers={"Origin": platform.tool_url},
    )
    assert_refused(again, LaunchCheck.STATE)


def test_a_storage_target_that_is_no_frame_name_is_refused(
    browser_client: httpx.Client, platform: FakePlatform
) -> None:
    platform.storage_target = "<script>"
    login = browser_client.get(
        f"{platform.tool_url}/lti/login?{urlencode(platform.login_params())}"
    )
    assert_refused(login, LaunchCheck.LOGIN_REQUEST)


def test_without_a_storage_target_the_login_redirects_at_once(
    browser_client: httpx.Client, platform: FakePlatform, sessions: SessionFactory
) -> None:
    login = browser_client.get(
        f"{platform.tool_url}/lti/login?{urlencode(platform.login_params())}"
    )
    assert login.status_code == 302
    with sessions() as session:
        assert session.scalars(select(LtiLoginState.storage_target)).one() is None
