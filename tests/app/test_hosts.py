"""The server's own address (app/hosts.py): a request for another Host is refused before any
route runs, and every absolute link (a mailed reset link, the LTI URLs, the client's login
line) is built on LOOPGRADE_PUBLIC_URL, never on a header the client wrote."""

from __future__ import annotations

import logging
import re

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy import select

from app.db import SessionFactory
from app.hosts import PublicUrlRequired, host_name
from app.main import create_app
from app.models import PasswordResetRequest
from app.settings import Settings
from tests.app import test_password_reset
from tests.app.conftest import loopgrade
from tests.app.people import make_user, token_of
from tests.app.test_password_reset import _Inbox, wait_for
from tests.servers import HTTP_TIMEOUT_SECONDS, app_in_thread, free_port

PUBLIC = "https://grader.example.edu"
inbox = test_password_reset.inbox  # a real SMTP server on loopback (a fixture)


def forgot_password(
    client: httpx.Client, email: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    """The form sent as a browser sends it; `headers` over the real ones (a forged Host)."""
    token = token_of(client.get("/forgot-password"))
    return client.post(
        "/forgot-password", data={"email": email, "csrf_token": token}, headers=headers or {}
    )


def test_a_forged_host_with_a_matching_origin_is_refused_and_mails_nothing(
    client: httpx.Client, sessions: SessionFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="loopgrade.mail")
    make_user(sessions, "ada@example.org")
    refused = forgot_password(
        client,
        "ada@example.org",
        # The CSRF check compares Origin with Host: both forged alike pass it.
        {"Host": "evil.example", "Origin": "http://evil.example"},
    )
    assert refused.status_code == 400
    assert "This server does not answer to the host “evil.example”." in refused.text
    with sessions() as session:
        assert session.scalars(select(PasswordResetRequest)).all() == []
    # Every page alike, with a port or without, and a host name hidden behind user info.
    for host in ("evil.example:80", "EVIL.example", "evil.example@127.0.0.1", "127.0.0.1 x"):
        assert client.get("/", headers={"Host": host}).status_code == 400, host
    # A load balancer's liveness probe names the server by an internal name: answered.
    probe = client.get("/healthz", headers={"Host": "10.0.0.7:8000"})
    assert (probe.status_code, probe.json()) == (200, {"status": "ok"})
    assert client.get("/readyz", headers={"Host": "evil.example"}).status_code == 400
    assert client.get("/api/v1/exercises", headers={"Host": "evil.example"}).json() == {
        "detail": "This server does not answer to the host “evil.example”. "
        "Open it at the address it was started at."
    }
    # The server's own names: the address it listens on, loopback names.
    port = client.base_url.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "[::1]:8000"):
        assert client.get("/healthz", headers={"Host": host}).status_code == 200, host
    assert not [r for r in caplog.records if r.name == "loopgrade.mail"]


def test_links_are_built_on_the_public_url_whatever_the_headers_say(
    settings: Settings, sessions: SessionFactory, inbox: tuple[_Inbox, int]
) -> None:
    mailbox, port = inbox
    make_user(sessions, "ada@example.org")
    public = settings.model_copy(
        update={
            "smtp_host": "127.0.0.1",
            "smtp_port": port,
            "smtp_tls": "none",
            "public_url": PUBLIC,
            # Behind a proxy on loopback that forwards the public Host.
            "trusted_proxies": "127.0.0.1",
            "allowed_hosts": "loopgrade-api",
        }
    )
    with (
        app_in_thread(create_app(public)) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        proxied = {"Host": "grader.example.edu", "X-Forwarded-For": "203.0.113.9"}
        # A proxy passing on a forged Host: refused like a direct one.
        forged = {**proxied, "Host": "evil.example", "Origin": "https://evil.example"}
        assert forgot_password(client, "ada@example.org", forged).status_code == 400
        # X-Forwarded-Host is no one's word here; a name of allowed_hosts is answered, but
        # links are still built on the public URL.
        answers = [
            forgot_password(client, "ada@example.org", {**proxied, "X-Forwarded-Host": "evil"}),
            forgot_password(client, "ada@example.org", {"Host": "loopgrade-api:8000"}),
            forgot_password(client, "ada@example.org"),
        ]
        assert [answer.status_code for answer in answers] == [200, 200, 200]
        wait_for(lambda: len(mailbox.messages) == 3, "three mails")
        for message in mailbox.messages:
            body = message.get_payload(decode=True)
            assert isinstance(body, bytes)
            links = re.findall(r"\S+/reset-password\?token=\S+", body.decode())
            assert len(links) == 1 and links[0].startswith(f"{PUBLIC}/reset-password?token=")

        # The client's login line and the LTI configuration: the public URL too.
        config = client.get("/lti/config", headers={"Host": "loopgrade-api"}).json()
        assert config["target_link_uri"] == f"{PUBLIC}/lti/launch"
        assert client.get("/lti/config", headers={"Host": "evil.example"}).status_code == 400


def test_without_a_public_url_links_follow_the_servers_own_address(
    client: httpx.Client,
) -> None:
    config = client.get("/lti/config").json()
    assert config["target_link_uri"] == f"http://127.0.0.1:{client.base_url.port}/lti/launch"
    config = client.get("/lti/config", headers={"Host": "localhost:1234"}).json()
    assert config["target_link_uri"] == "http://localhost:1234/lti/launch"


def test_mail_needs_a_public_url_to_start(settings: Settings) -> None:
    mailing = settings.model_copy(update={"smtp_host": "127.0.0.1"})
    with pytest.raises(PublicUrlRequired, match="LOOPGRADE_PUBLIC_URL must be set"):
        create_app(mailing)
    result = loopgrade(
        "serve",
        "--port",
        str(free_port()),
        data_dir=settings.data_dir,
        env={"LOOPGRADE_SMTP_HOST": "127.0.0.1"},
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "loopgrade: LOOPGRADE_PUBLIC_URL must be set (e.g. https://grader.example.edu) when "
        "LOOPGRADE_SMTP_HOST is: mailed links are built on it, never on a request's Host"
    )


@pytest.mark.parametrize(
    "url",
    [
        "grader.example.edu",
        "ftp://grader.example.edu",
        "https://grader.example.edu/x",
        "https://a@grader.example.edu",
        "https://grader.example.edu/?next=x",
        "https://",
    ],
)
def test_a_public_url_is_a_servers_address(url: str) -> None:
    with pytest.raises(ValidationError, match="is not a server's address"):
        Settings(public_url=url)


def test_public_url_and_host_names_read_alike() -> None:
    assert Settings(public_url="https://Grader.example.edu:8443/").public_url == (
        "https://Grader.example.edu:8443"
    )
    assert host_name("Grader.Example.edu.:443") == "grader.example.edu"
    assert host_name("[::1]:8000") == "::1"
    assert host_name("evil.example@127.0.0.1") == ""
    assert host_name("a/b") == ""


def test_the_cli_link_is_built_on_the_public_url(
    settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    result = loopgrade(
        "users",
        "reset-password",
        "ada@example.org",
        data_dir=settings.data_dir,
        env={"LOOPGRADE_PUBLIC_URL": PUBLIC},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{PUBLIC}/reset-password?token=")
    assert "LOOPGRADE_PUBLIC_URL is not set" not in result.stderr
