"""Anyone who knows a registered issuer (it is public) may start an LTI login, and each is a
row until it expires: logins are counted per client address and in all, and expired ones are
swept. Client addresses come from X-Forwarded-For through a trusted proxy on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, update

from app.db import SessionFactory
from app.integrations.models import LtiLoginState
from app.models import utc_now
from app.settings import Settings
from tests.conftest import migrated_database
from tests.lti.conftest import form_fields
from tests.lti.fake_platform import FakePlatform
from tests.servers import HTTP_TIMEOUT_SECONDS

PER_ADDRESS, IN_TOTAL = 3, 5
ONE, OTHER = "198.51.100.7", "203.0.113.9"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    settings = Settings(
        data_dir=tmp_path / "data",
        trusted_proxies="127.0.0.1",
        lti_max_logins_per_address=PER_ADDRESS,
        lti_max_logins=IN_TOTAL,
        sandbox_pool_size=0,
    )
    migrated_database(settings.database_url)
    return settings


@pytest.fixture
def client(platform: FakePlatform) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=platform.tool_url, timeout=HTTP_TIMEOUT_SECONDS) as found:
        yield found


def start_login(
    client: httpx.Client, platform: FakePlatform, address: str, method: str = "GET"
) -> httpx.Response:
    headers = {"X-Forwarded-For": address}
    if method == "GET":
        return client.get("/lti/login", params=platform.login_params(), headers=headers)
    return client.post("/lti/login", data=platform.login_params(), headers=headers)


def stored_logins(sessions: SessionFactory) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(LtiLoginState)) or 0


def test_one_address_starts_a_bounded_number_of_logins(
    client: httpx.Client, platform: FakePlatform, sessions: SessionFactory
) -> None:
    for n in range(PER_ADDRESS):
        assert start_login(client, platform, ONE, "GET" if n % 2 else "POST").status_code == 302
    for method in ("GET", "POST"):
        refused = start_login(client, platform, ONE, method)
        assert refused.status_code == 429, refused.text
        assert 1 <= int(refused.headers["Retry-After"]) <= 600
        assert "open the link in the LMS again" in refused.text
    assert stored_logins(sessions) == PER_ADDRESS
    # Another address is not paused by the first.
    assert start_login(client, platform, OTHER).status_code == 302


def test_all_addresses_together_start_a_bounded_number(
    client: httpx.Client, platform: FakePlatform, sessions: SessionFactory
) -> None:
    for n in range(IN_TOTAL):
        assert start_login(client, platform, f"192.0.2.{n}").status_code == 302
    refused = start_login(client, platform, "192.0.2.200")
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1
    assert stored_logins(sessions) == IN_TOTAL


def test_expired_logins_are_swept_and_count_no_more(
    client: httpx.Client, platform: FakePlatform, sessions: SessionFactory, settings: Settings
) -> None:
    for _ in range(PER_ADDRESS):
        assert start_login(client, platform, ONE).status_code == 302
    assert start_login(client, platform, ONE).status_code == 429
    lifetime = timedelta(seconds=settings.lti_state_max_age_seconds)
    with sessions.begin() as session:
        session.execute(
            update(LtiLoginState).values(
                created_at=utc_now() - lifetime - timedelta(seconds=2),
                expires_at=utc_now() - timedelta(seconds=1),
            )
        )
    assert start_login(client, platform, ONE).status_code == 302
    assert stored_logins(sessions) == 1  # the expired three are gone


def test_a_login_for_no_registered_platform_stores_nothing(
    client: httpx.Client, platform: FakePlatform, sessions: SessionFactory
) -> None:
    for issuer in ("https://unknown.example", "x" * 2000):
        params = {**platform.login_params(), "iss": issuer}
        assert client.get("/lti/login", params=params).status_code == 400
    assert client.get("/lti/login", params={"iss": platform.issuer}).status_code == 400
    assert stored_logins(sessions) == 0


def test_a_refused_address_still_launches_once_a_login_expires(
    client: httpx.Client, platform: FakePlatform, sessions: SessionFactory, settings: Settings
) -> None:
    """The limits count what is stored: a whole launch from a paused address works again as
    soon as a login of its leaves the window."""
    for _ in range(PER_ADDRESS):
        assert start_login(client, platform, ONE).status_code == 302
    with sessions.begin() as session:
        oldest = session.scalars(select(LtiLoginState.state).limit(1)).one()
        session.execute(
            update(LtiLoginState)
            .where(LtiLoginState.state == oldest)
            .values(created_at=utc_now() - timedelta(seconds=settings.lti_state_max_age_seconds))
        )
    started = start_login(client, platform, ONE)
    assert started.status_code == 302
    form = client.get(started.headers["location"])
    launched = client.post("/lti/launch", data=form_fields(form.text))
    assert launched.status_code == 303, launched.text
    assert launched.headers["location"].startswith("/lti/enter?ticket=")
