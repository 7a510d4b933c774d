"""`loopgrade users ...`: list, reset-password, disable, enable, set-role."""

from __future__ import annotations

import httpx
from sqlalchemy import select

from app.audit import AuditAction
from app.db import SessionFactory
from app.models import AuditEvent, SiteRole, User
from app.settings import Settings
from tests.app.conftest import loopgrade
from tests.app.people import PASSWORD, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS


def test_reset_password_prints_a_one_time_link(
    client: httpx.Client, settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    result = loopgrade("users", "reset-password", "ada@example.org", data_dir=settings.data_dir)
    assert result.returncode == 0, result.stderr
    assert "LOOPGRADE_PUBLIC_URL is not set" in result.stderr
    link = result.stdout.strip()
    path = link[link.index("/reset-password") :]
    page = client.get(path)
    assert page.status_code == 200
    token = path.split("token=")[1]
    done = client.post(
        "/reset-password",
        data={
            "csrf_token": token_of(page),
            "token": token,
            "password": "set from the link",
            "password_again": "set from the link",
        },
    )
    assert done.status_code == 303
    assert client.get(path).status_code == 400

    unknown = loopgrade("users", "reset-password", "nobody@example.org", data_dir=settings.data_dir)
    assert unknown.returncode == 1 and "no account has the email" in unknown.stderr


def test_reset_password_set_ends_the_sessions(
    client: httpx.Client, settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    sign_in(client, "ada@example.org")
    result = loopgrade(
        "users",
        "reset-password",
        "ada@example.org",
        "--set",
        data_dir=settings.data_dir,
        env={"LOOPGRADE_PASSWORD": "set by the operator"},
    )
    assert result.returncode == 0, result.stderr
    assert "1 sessions ended" in result.stdout
    assert client.get("/account").status_code == 303
    fresh = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(fresh, "ada@example.org", "set by the operator").status_code == 303

    short = loopgrade(
        "users",
        "reset-password",
        "ada@example.org",
        "--set",
        data_dir=settings.data_dir,
        env={"LOOPGRADE_PASSWORD": "short"},
    )
    assert short.returncode == 1 and "at least" in short.stderr


def test_disable_enable_and_set_role_are_audited(
    client: httpx.Client, settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    sign_in(client, "ada@example.org")
    disabled = loopgrade("users", "disable", "ada@example.org", data_dir=settings.data_dir)
    assert disabled.returncode == 0, disabled.stderr
    assert "1 sessions ended" in disabled.stdout
    assert client.get("/account").status_code == 303
    assert sign_in(client, "ada@example.org").status_code == 403
    listed = loopgrade("users", "list", data_dir=settings.data_dir)
    assert "ada@example.org  learner  disabled" in listed.stdout

    enabled = loopgrade("users", "enable", "ada@example.org", data_dir=settings.data_dir)
    assert enabled.returncode == 0, enabled.stderr
    assert sign_in(client, "ada@example.org", PASSWORD).status_code == 303

    role = loopgrade(
        "users", "set-role", "ada@example.org", "instructor", data_dir=settings.data_dir
    )
    assert role.returncode == 0 and "learner -> instructor" in role.stdout
    bad = loopgrade("users", "set-role", "ada@example.org", "king", data_dir=settings.data_dir)
    assert bad.returncode == 2
    with sessions() as session:
        assert session.scalars(select(User.site_role)).one() == SiteRole.INSTRUCTOR
        actions = session.scalars(select(AuditEvent.action).order_by(AuditEvent.id)).all()
    assert actions == [
        AuditAction.ACCOUNT_DISABLED,
        AuditAction.ACCOUNT_ENABLED,
        AuditAction.SITE_ROLE_CHANGED,
    ]
