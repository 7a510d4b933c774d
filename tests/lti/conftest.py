"""Fixtures for LTI: the tool served over HTTP, the fake platform on another port, and a
launch helper that goes through login, the platform's auth endpoint and the launch."""

from __future__ import annotations

import html
import http.cookiejar
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.db import SessionFactory, create_db_engine, create_session_factory
from app.integrations.models import LtiContext
from app.integrations.platforms import add_platform
from app.integrations.webhooks import create_webhook
from app.main import create_app
from app.settings import Settings
from tests.conftest import migrated_database
from tests.lti.fake_platform import FakePlatform, follow_login
from tests.lti.receiver import Receiver
from tests.servers import HTTP_TIMEOUT_SECONDS, app_in_thread

LEEWAY_SECONDS = 60


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    settings = Settings(
        data_dir=tmp_path / "data",
        lti_leeway_seconds=LEEWAY_SECONDS,
        # Every unknown kid may fetch the platform's JWKS again (the rotation tests need it).
        lti_jwks_refetch_interval_seconds=0,
        submission_rate_limit=0,
        # No pool of its own (seconds of CPU to start): the session's shared one grades.
        sandbox_pool_size=0,
        # test_iframe.py serves the tool under a name that is not loopback, as an LMS frames it.
        allowed_hosts="tool.test",
    )
    migrated_database(settings.database_url)
    return settings


@pytest.fixture
def sessions(settings: Settings) -> Iterator[SessionFactory]:
    engine = create_db_engine(settings.database_url)
    yield create_session_factory(engine)
    engine.dispose()


@pytest.fixture
def tool_url(settings: Settings) -> Iterator[str]:
    with app_in_thread(create_app(settings)) as url:
        yield url


@pytest.fixture
def platform(tool_url: str, sessions: SessionFactory) -> Iterator[FakePlatform]:
    """A fake platform, served and registered with the tool."""
    fake = FakePlatform(tool_url=tool_url)
    with app_in_thread(fake.app()) as url:
        fake.url = url
        with sessions.begin() as session:
            add_platform(session, **fake.registration())
        yield fake


@pytest.fixture
def browser_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    """A client keeping cookies as a browser does on loopback, where plain http from
    127.0.0.1 is a secure context: `Secure` cookies are sent back. (httpx copies its cookie
    jar into one with the default policy on every request, so the policy is patched.)"""
    monkeypatch.setattr(
        http.cookiejar.DefaultCookiePolicy, "return_ok_secure", lambda self, cookie, request: True
    )
    with httpx.Client(timeout=HTTP_TIMEOUT_SECONDS) as client:
        yield client


def form_fields(page: str) -> dict[str, str]:
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page)
    return {name: html.unescape(value) for name, value in found}


Launch = Callable[..., httpx.Response]


@pytest.fixture
def launch(browser_client: httpx.Client, platform: FakePlatform) -> Launch:
    """Launch through login and the platform; `tamper(id_token) -> id_token` alters the token.
    Returns the tool's answer to the launch POST (not followed)."""

    def run(
        tamper: Callable[[str], str] | None = None,
        *,
        method: str = "GET",
        client: httpx.Client | None = None,
    ) -> httpx.Response:
        client = client or browser_client
        page = follow_login(client, platform, method)
        assert page.status_code == 200, page.text
        fields = form_fields(page.text)
        if tamper is not None:
            fields["id_token"] = tamper(fields["id_token"])
        return client.post(f"{platform.tool_url}/lti/launch", data=fields)

    return run


def launch_to_exercise(client: httpx.Client, platform: FakePlatform) -> httpx.Response:
    """Log in, launch, and follow the launch to the exercise page of the platform's link."""
    page = follow_login(client, platform)
    launched = client.post(f"{platform.tool_url}/lti/launch", data=form_fields(page.text))
    assert launched.status_code == 303, launched.text
    exercise = client.get(platform.tool_url + launched.headers["location"], follow_redirects=True)
    assert exercise.url.path.endswith("/exercises/train-step"), exercise.text
    return exercise


def give_course_webhook(sessions: SessionFactory, receiver: Receiver) -> None:
    """A webhook to `receiver` for the course the launch made (the only one)."""
    with sessions.begin() as session:
        course_id = session.scalars(select(LtiContext.course_id)).one()
        receiver.secret = create_webhook(
            session, course_id=course_id, url=receiver.url, allow_private_addresses=True
        ).secret


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook subscriber on 127.0.0.1 (give it the webhook's secret)."""
    found = Receiver()
    with app_in_thread(found.app()) as url:
        found.url = f"{url}/hook"
        yield found
