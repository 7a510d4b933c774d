"""Secrets a link carries in its query (a reset link's token, an LTI launch's tickets) are not
written to the access log of a real `loopgrade serve`, whatever the parameter's spelling."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from app.db import SessionFactory
from app.operations import redact_query_secrets
from app.people.accounts import find_user_by_email
from app.people.recovery import issue_reset_link
from app.settings import Settings
from tests.app.people import make_user
from tests.servers import HTTP_TIMEOUT_SECONDS, running_server


def test_opened_links_leave_no_secret_in_the_access_log(
    settings: Settings, sessions: SessionFactory, tmp_path: Path
) -> None:
    make_user(sessions, "ada@example.org")
    with sessions.begin() as session:
        user = find_user_by_email(session, "ada@example.org")
        assert user is not None
        token = issue_reset_link(session, user, client_address="test", max_age_seconds=600).token
    secret = token.split(".", 1)[1]
    log_path = tmp_path / "serve.log"
    # It grades nothing: no warm pool to start (two sandboxes importing torch).
    env = {**os.environ, "LOOPGRADE_SANDBOX_POOL_SIZE": "0"}
    with (
        running_server(settings.data_dir, log_path, env) as (_, url),
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        assert client.get(f"/reset-password?token={token}").status_code == 200
        # The name as the server reads it: percent-decoded.
        assert client.get(f"/reset-password?x=1&tok%65n={token}").status_code == 200
        assert client.get("/lti/enter?ticket=ticket-secret-1").status_code == 400
        retry = "/lti/session-check?next=%2F&retry=ticket-secret-2"
        assert client.get(retry).status_code in (200, 303)
    logged = log_path.read_text()
    assert '"GET /reset-password?token=[redacted] HTTP/1.1" 200' in logged
    assert '"GET /reset-password?x=1&tok%65n=[redacted] HTTP/1.1" 200' in logged
    assert '"GET /lti/enter?ticket=[redacted] HTTP/1.1" 400' in logged
    assert "/lti/session-check?next=%2F&retry=[redacted] " in logged
    for leaked in (secret, "ticket-secret-1", "ticket-secret-2"):
        assert leaked not in logged


def test_only_secret_parameters_are_redacted() -> None:
    assert redact_query_secrets("GET /sign-up?code=K7QX2MPA") == "GET /sign-up?code=K7QX2MPA"
    assert (
        redact_query_secrets("/a?Token=s&b=2;ticket=t")
        == "/a?Token=[redacted]&b=2;ticket=[redacted]"
    )
    assert redact_query_secrets("no query: token=plain") == "no query: token=plain"
