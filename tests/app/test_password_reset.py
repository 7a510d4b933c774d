"""Password reset by a mailed link: the console back-end (the log) and a real SMTP server on
loopback (aiosmtpd), single use, expiry, the password change that voids a link, the limits,
and answers that never say whether an account has an email."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from email import message_from_bytes
from email.message import Message

import httpx
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword
from sqlalchemy import select, update

from app.audit import AuditAction
from app.db import SessionFactory
from app.main import create_app
from app.models import AuditEvent, PasswordResetRequest, User, utc_now
from app.people.accounts import find_user_by_email, set_password
from app.settings import Settings
from tests.app.people import make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS, app_in_thread, free_port

NEW_PASSWORD = "a brand new password"
_LINK = re.compile(r"http://\S+/reset-password\?token=(\S+)")


def wait_for(found: Callable[[], object], what: str) -> None:
    """Poll `found()` (the mail goes out after the response) until it is truthy."""
    deadline = time.monotonic() + HTTP_TIMEOUT_SECONDS
    while not found():
        assert time.monotonic() < deadline, f"no {what} in time"
        time.sleep(0.05)


def ask_for_link(client: httpx.Client, email: str) -> httpx.Response:
    token = token_of(client.get("/forgot-password"))
    return client.post("/forgot-password", data={"email": email, "csrf_token": token})


def logged_links(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        match[0]
        for record in caplog.records
        if record.name == "loopgrade.mail"
        for match in [_LINK.search(record.getMessage())]
        if match
    ]


def set_new_password(
    client: httpx.Client, link: str, password: str = NEW_PASSWORD
) -> httpx.Response:
    page = client.get(link)
    assert page.status_code == 200, page.text
    token = re.search(r'name="token" value="([^"]+)"', page.text)
    assert token
    return client.post(
        "/reset-password",
        data={
            "csrf_token": token_of(page),
            "token": token[1].replace("&#34;", '"'),
            "password": password,
            "password_again": password,
        },
    )


def test_reset_by_the_logged_link_signs_out_everywhere_once(
    client: httpx.Client,
    sessions: SessionFactory,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="loopgrade.mail")
    user_id = make_user(sessions, "ada@example.org", name="Ada")
    elsewhere = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(elsewhere, "ada@example.org").status_code == 303

    known = ask_for_link(client, "Ada@Example.org")
    unknown = ask_for_link(client, "nobody@example.org")
    assert known.status_code == unknown.status_code == 200
    # The same answer for an account and for no account, but for the email echoed.
    assert known.text.replace("Ada@Example.org", "X") == unknown.text.replace(
        "nobody@example.org", "X"
    )
    wait_for(lambda: logged_links(caplog), "logged mail")
    links = logged_links(caplog)
    assert len(links) == 1, "a mail went out for the email without an account"
    mail_text = next(r.getMessage() for r in caplog.records if r.name == "loopgrade.mail")
    assert "To: ada@example.org" in mail_text and "Hello Ada" in mail_text

    # Only the secret's hash is stored.
    secret = links[0].split("token=")[1].split(".", 1)[1]
    with sessions() as session:
        stored = session.scalars(select(PasswordResetRequest.token_hash)).all()
    assert secret not in str(stored)

    done = set_new_password(client, links[0])
    assert done.status_code == 303 and done.headers["location"] == "/account?done=reset"
    assert "Every other browser is signed out" in client.get(done.headers["location"]).text
    # The other browser was signed out.
    assert elsewhere.get("/account").status_code == 303
    # The link works once.
    assert client.get(links[0]).status_code == 400
    again = client.post(
        "/reset-password",
        data={
            "csrf_token": token_of(client.get("/account")),
            "token": links[0].split("token=")[1],
            "password": "yet another password",
            "password_again": "yet another password",
        },
    )
    assert again.status_code == 400
    # The old password is gone, the new one signs in.
    fresh = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(fresh, "ada@example.org").status_code == 401
    assert sign_in(fresh, "ada@example.org", NEW_PASSWORD).status_code == 303
    with sessions() as session:
        event = session.scalars(
            select(AuditEvent).where(AuditEvent.action == AuditAction.PASSWORD_RESET)
        ).one()
        assert event.actor_id == user_id and event.details["sessions_ended"] == 1


def test_a_link_expires_and_a_password_change_voids_it(
    client: httpx.Client, sessions: SessionFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="loopgrade.mail")
    make_user(sessions, "ada@example.org")
    ask_for_link(client, "ada@example.org")
    wait_for(lambda: logged_links(caplog), "logged mail")
    first = logged_links(caplog)[0]
    with sessions.begin() as session:
        session.execute(update(PasswordResetRequest).values(expires_at=utc_now()))
    assert client.get(first).status_code == 400

    ask_for_link(client, "ada@example.org")
    wait_for(lambda: len(logged_links(caplog)) == 2, "second mail")
    second = logged_links(caplog)[1]
    assert client.get(second).status_code == 200
    with sessions.begin() as session:
        user = find_user_by_email(session, "ada@example.org")
        assert user is not None
        set_password(session, user, "changed meanwhile!")
    assert client.get(second).status_code == 400
    # A forged token (a real row id, a wrong secret) is refused alike.
    row_id = second.split("token=")[1].split(".")[0]
    assert client.get(f"/reset-password?token={row_id}.forged").status_code == 400
    assert client.get("/reset-password?token=nonsense").status_code == 400


def test_the_requester_is_limited_never_the_account(
    settings: Settings, sessions: SessionFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="loopgrade.mail")
    make_user(sessions, "ada@example.org")
    limited = settings.model_copy(
        update={
            "password_reset_max_per_address": 5,
            "password_reset_max_live_links": 2,
            "trusted_proxies": "127.0.0.1",  # each test request names its client address
        }
    )
    attacker = {"X-Forwarded-For": "203.0.113.1"}
    owner = {"X-Forwarded-For": "198.51.100.7"}

    def ask(email: str, headers: dict[str, str]) -> httpx.Response:
        token = token_of(client.get("/forgot-password", headers=headers))
        return client.post(
            "/forgot-password", data={"email": email, "csrf_token": token}, headers=headers
        )

    with (
        app_in_thread(create_app(limited)) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        answers = [ask("ada@example.org", attacker) for _ in range(4)]
        answers.append(ask("nobody@example.org", attacker))
        assert [answer.status_code for answer in answers] == [200] * 5
        # An account with more links than it may have working is answered as one without.
        assert answers[-2].text.replace("ada@", "X@") == answers[-1].text.replace("nobody@", "X@")
        # The attacker's address is stopped; the account is not.
        refused = ask("ada@example.org", attacker)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
        assert "from your network" in refused.text
        assert ask("ada@example.org", owner).status_code == 200
        # Only two mails went out: the owner holds a working link, the newest.
        wait_for(lambda: len(logged_links(caplog)) == 2, "two mails")
        newest = logged_links(caplog)[-1]
        assert client.get(newest.replace(url, "")).status_code == 200
        # Once the links stop working, the owner's next request mails a new one.
        with sessions.begin() as session:
            session.execute(update(PasswordResetRequest).values(expires_at=utc_now()))
        assert ask("ada@example.org", owner).status_code == 200
        wait_for(lambda: len(logged_links(caplog)) == 3, "a third mail")
        assert set_new_password(client, logged_links(caplog)[-1]).status_code == 303


def test_forms_need_the_csrf_token(client: httpx.Client, sessions: SessionFactory) -> None:
    make_user(sessions, "ada@example.org")
    client.get("/forgot-password")
    assert client.post("/forgot-password", data={"email": "ada@example.org"}).status_code == 403
    response = client.post(
        "/reset-password",
        data={"token": "1.x", "password": NEW_PASSWORD, "password_again": NEW_PASSWORD},
    )
    assert response.status_code == 403
    with sessions() as session:
        assert session.scalars(select(PasswordResetRequest)).all() == []


class _Inbox:
    """What a real SMTP server on loopback received, and who logged in to it."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.logins: list[tuple[bytes, bytes]] = []

    async def handle_DATA(self, server: SMTPServer, session: object, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"

    def authenticate(
        self, server: SMTPServer, session: object, envelope: Envelope, mechanism: str, data: object
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        self.logins.append((data.login, data.password))
        return AuthResult(success=data.password == b"smtp secret")


@pytest.fixture
def inbox() -> Iterator[tuple[_Inbox, int]]:
    mailbox = _Inbox()
    port = free_port()
    controller = Controller(
        mailbox,
        hostname="127.0.0.1",
        port=port,
        authenticator=mailbox.authenticate,
        auth_require_tls=False,
    )
    controller.start()
    try:
        yield mailbox, port
    finally:
        controller.stop()


def test_the_link_goes_out_by_smtp(
    settings: Settings, sessions: SessionFactory, inbox: tuple[_Inbox, int]
) -> None:
    mailbox, port = inbox
    make_user(sessions, "ada@example.org", name="Ada")
    smtp_settings = settings.model_copy(
        update={
            "smtp_host": "127.0.0.1",
            "smtp_port": port,
            "smtp_tls": "none",
            "smtp_user": "loopgrade",
            "smtp_password": "smtp secret",
            "mail_from": "Grader <grader@example.edu>",
            "public_url": "http://grader.example.edu",
        }
    )
    with (
        app_in_thread(create_app(smtp_settings)) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        assert ask_for_link(client, "ada@example.org").status_code == 200
        wait_for(lambda: mailbox.messages, "mail at the SMTP server")
        message = mailbox.messages[0]
        assert message["To"] == "ada@example.org"
        assert message["From"] == "Grader <grader@example.edu>"
        assert mailbox.logins == [(b"loopgrade", b"smtp secret")]
        body = message.get_payload(decode=True)
        assert isinstance(body, bytes)
        link = _LINK.search(body.decode())
        assert link and link[0].startswith("http://grader.example.edu/reset-password?token=")
        # The public address is for mail; the link's path works on this server.
        local = link[0].replace("http://grader.example.edu", "")
        assert set_new_password(client, local).status_code == 303
    with sessions() as session:
        user = session.scalars(select(User)).one()
        assert user.password_hash.startswith("$argon2id$")


def test_an_unreachable_smtp_server_is_logged_not_shown(
    settings: Settings, sessions: SessionFactory, caplog: pytest.LogCaptureFixture
) -> None:
    make_user(sessions, "ada@example.org")
    broken = settings.model_copy(
        update={
            "smtp_host": "127.0.0.1",
            "smtp_port": free_port(),
            "smtp_tls": "none",
            "public_url": "http://grader.example.edu",
        }
    )
    caplog.set_level(logging.ERROR, logger="loopgrade.accounts")
    with (
        app_in_thread(create_app(broken)) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        # The same answer as ever: the learner is not told more about the account.
        assert ask_for_link(client, "ada@example.org").status_code == 200
        wait_for(lambda: any("not mailed" in r.getMessage() for r in caplog.records), "error log")
