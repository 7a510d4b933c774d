"""The account page (/account): name, password, signed-in browsers; accounts from an LMS; and
accounts disabled by an administrator."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import select, update

from app.access import browser_name
from app.audit import AuditAction
from app.db import SessionFactory
from app.models import AuditEvent, Enrolment, SiteRole, Submission, User, WebSession
from app.people.accounts import NO_PASSWORD, disable_user, find_user_by_email
from tests.app.people import (
    PASSWORD,
    graded,
    make_course,
    make_user,
    post_form,
    sign_in,
    token_of,
)
from tests.app.test_personal_tokens import new_token
from tests.servers import HTTP_TIMEOUT_SECONDS

NEW_PASSWORD = "another long password"


def browser(client: httpx.Client, user_agent: str = "test browser") -> httpx.Client:
    return httpx.Client(
        base_url=str(client.base_url),
        timeout=HTTP_TIMEOUT_SECONDS,
        headers={"User-Agent": user_agent},
    )


def test_the_page_needs_a_signed_in_user(client: httpx.Client) -> None:
    response = client.get("/account")
    assert response.status_code == 303 and response.headers["location"].startswith("/sign-in")


def test_change_the_name(client: httpx.Client, sessions: SessionFactory) -> None:
    make_user(sessions, "ada@example.org", name="Ada")
    sign_in(client, "ada@example.org")
    page = client.get("/account")
    assert 'href="/account/tokens"' in page.text and "ada@example.org" in page.text
    done = post_form(client, "/account", "/account/name", {"name": "  Ada   Lovelace "})
    assert done.status_code == 303
    assert "Your name is changed." in client.get(done.headers["location"]).text
    with sessions() as session:
        assert session.scalars(select(User.name)).one() == "Ada Lovelace"
    # A name that hides text is refused with the reason, and nothing changes.
    refused = post_form(client, "/account", "/account/name", {"name": "Ada\u202eecalevoL"})
    assert refused.status_code == 422 and 'id="name-error"' in refused.text
    empty = post_form(client, "/account", "/account/name", {"name": "   "})
    assert empty.status_code == 422
    with sessions() as session:
        assert session.scalars(select(User.name)).one() == "Ada Lovelace"


def test_change_the_password_needs_the_current_one_and_signs_out_elsewhere(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    sign_in(client, "ada@example.org")
    elsewhere = browser(client)
    sign_in(elsewhere, "ada@example.org")

    wrong = post_form(
        client,
        "/account",
        "/account/password",
        {
            "current_password": "not the password",
            "new_password": NEW_PASSWORD,
            "new_password_again": NEW_PASSWORD,
        },
    )
    assert wrong.status_code == 422 and "current password is not right" in wrong.text
    differ = post_form(
        client,
        "/account",
        "/account/password",
        {
            "current_password": PASSWORD,
            "new_password": NEW_PASSWORD,
            "new_password_again": NEW_PASSWORD + "x",
        },
    )
    assert differ.status_code == 422 and "differ" in differ.text
    assert elsewhere.get("/account").status_code == 200

    done = post_form(
        client,
        "/account",
        "/account/password",
        {
            "current_password": PASSWORD,
            "new_password": NEW_PASSWORD,
            "new_password_again": NEW_PASSWORD,
        },
    )
    assert done.status_code == 303
    assert client.get("/account").status_code == 200  # this browser stays signed in
    assert elsewhere.get("/account").status_code == 303  # the other was signed out
    fresh = browser(client)
    assert sign_in(fresh, "ada@example.org").status_code == 401
    assert sign_in(fresh, "ada@example.org", NEW_PASSWORD).status_code == 303


def test_sessions_are_listed_and_the_others_signed_out(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
    safari = (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_2 like Mac OS X) AppleWebKit/605.1.15 "
        "(KHTML, like Gecko) Version/17.2 Mobile/15E148 Safari/604.1"
    )
    here, phone = browser(client, firefox), browser(client, safari)
    sign_in(here, "ada@example.org")
    sign_in(phone, "ada@example.org")
    page = here.get("/account")
    # Named as people know them, not by the raw User-Agent.
    assert "Firefox 121 on Linux" in page.text and "Safari 17 on iPhone" in page.text
    assert "Mozilla/5.0" not in page.text
    assert page.text.count("(this browser)") == 1 and "127.0.0.1" in page.text

    done = post_form(here, "/account", "/account/sign-out-others", {})
    assert done.status_code == 303
    assert phone.get("/account").status_code == 303
    page = here.get("/account")
    assert "Safari 17" not in page.text and "Only this browser is signed in" in page.text
    with sessions() as session:
        assert len(session.scalars(select(WebSession)).all()) == 1


def test_every_account_form_needs_the_csrf_token(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org", name="Ada")
    sign_in(client, "ada@example.org")
    elsewhere = browser(client)
    sign_in(elsewhere, "ada@example.org")
    for action, data in (
        ("/account/name", {"name": "Mallory"}),
        (
            "/account/password",
            {
                "current_password": PASSWORD,
                "new_password": NEW_PASSWORD,
                "new_password_again": NEW_PASSWORD,
            },
        ),
        ("/account/sign-out-others", {}),
    ):
        assert client.post(action, data=data).status_code == 403, action
        # A token, but posted from another site.
        forged = client.post(
            action,
            data={**data, "csrf_token": token_of(client.get("/account"))},
            headers={"Origin": "https://evil.example"},
        )
        assert forged.status_code == 403, action
    assert elsewhere.get("/account").status_code == 200
    with sessions() as session:
        assert session.scalars(select(User.name)).one() == "Ada"


def test_an_lms_account_is_told_it_has_no_password(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "lee@example.org")
    sign_in(client, "lee@example.org")
    with sessions.begin() as session:
        session.execute(update(User).values(password_hash=NO_PASSWORD))
    page = client.get("/account")
    assert 'id="lms-account"' in page.text and 'action="/account/password"' not in page.text
    refused = post_form(
        client,
        "/account",
        "/account/password",
        {
            "current_password": NO_PASSWORD,
            "new_password": NEW_PASSWORD,
            "new_password_again": NEW_PASSWORD,
        },
    )
    assert refused.status_code == 422 and "has no password" in refused.text


@pytest.mark.parametrize("signed_in_first", [True, False])
def test_a_disabled_account_cannot_sign_in_and_its_sessions_end(
    client: httpx.Client, sessions: SessionFactory, signed_in_first: bool
) -> None:
    make_user(sessions, "ada@example.org")
    if signed_in_first:
        sign_in(client, "ada@example.org")
        assert client.get("/account").status_code == 200
    with sessions.begin() as session:
        user = find_user_by_email(session, "ada@example.org")
        assert user is not None
        disable_user(session, user)
    assert client.get("/account").status_code == 303
    refused = sign_in(browser(client), "ada@example.org")
    assert refused.status_code == 403 and "disabled" in refused.text
    # A wrong password is told as any wrong password: nothing about the account.
    wrong = sign_in(browser(client), "ada@example.org", "not the password")
    assert wrong.status_code == 401 and "disabled" not in wrong.text


def delete_form(client: httpx.Client, password: str, confirm: str = "delete") -> httpx.Response:
    return post_form(
        client, "/account", "/account/delete", {"password": password, "confirm": confirm}
    )


def test_deleting_the_account_keeps_its_submissions_as_deleted_records(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    ada = make_user(sessions, "ada@example.org", name="Ada")
    course_id = make_course(sessions, "tess@example.org", "ada@example.org")
    kept = graded(sessions, user_id=ada, course_id=course_id, score=10, learner="ada@example.org")
    sign_in(client, "ada@example.org")
    page = client.get("/account").text
    assert "Your submissions stay with the courses" in page
    assert delete_form(client, "not the password").status_code == 422
    unticked = delete_form(client, PASSWORD, confirm="")
    assert unticked.status_code == 422 and 'id="delete-error"' in unticked.text

    done = delete_form(client, PASSWORD)
    assert done.status_code == 303 and done.headers["location"] == "/"
    assert client.get("/account").status_code == 303
    with sessions() as session:
        user = session.get(User, ada)
        assert user is not None and user.name == "Deleted account"
        assert "ada" not in user.email and user.disabled_at is not None
        assert session.scalars(select(Enrolment).where(Enrolment.user_id == ada)).all() == []
        submission = session.get(Submission, kept)
        assert submission is not None and submission.learner == user.email
        assert (
            session.scalars(
                select(AuditEvent).where(AuditEvent.action == AuditAction.ACCOUNT_DELETED)
            )
            .one()
            .actor_id
            == ada
        )
    # The email is free again: signing up makes a new, empty account; the old password is gone.
    assert sign_in(browser(client), "ada@example.org").status_code == 401
    teacher = browser(client)
    sign_in(teacher, "tess@example.org")
    assert "ada@example.org" not in teacher.get(f"/courses/{course_id}/gradebook").text


def test_a_courses_only_instructor_hands_over_before_deleting(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    course_id = make_course(sessions, "tess@example.org")
    sign_in(client, "tess@example.org")
    page = client.get("/account").text
    assert 'id="delete-blocked"' in page and f"/courses/{course_id}/settings" in page
    refused = delete_form(client, PASSWORD)
    assert refused.status_code == 422 and "only instructor of Deep Learning 101" in refused.text
    with sessions() as session:
        assert session.scalars(select(User.name)).one() != "Deleted account"


def test_a_disabled_accounts_personal_token_is_refused(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    sign_in(client, "ada@example.org")
    bearer = {"Authorization": f"Bearer {new_token(client)}"}
    assert client.get("/api/v1/me/exercises", headers=bearer).status_code == 200
    with sessions.begin() as session:
        user = find_user_by_email(session, "ada@example.org")
        assert user is not None
        disable_user(session, user)
    refused = client.get("/api/v1/me/exercises", headers=bearer)
    assert refused.status_code == 401 and "disabled" in refused.json()["detail"]


def test_a_signed_in_browser_is_named_as_people_know_it() -> None:
    """The sessions table's Browser column: a name and a system, never the raw string."""
    samples = {
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91": "Edge 120 on Windows",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_2 like Mac OS X) AppleWebKit/605.1.15 "
        "(KHTML, like Gecko) Version/17.2 Mobile/15E148 Safari/604.1": "Safari 17 on iPhone",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 14.2; rv:121.0) Gecko/20100101 "
        "Firefox/121.0": "Firefox 121 on macOS",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "HeadlessChrome/131.0.0.0 Safari/537.36": "Chrome 131 on Linux",
        "curl/8.5.0": "unknown browser",
        "": "unknown browser",
    }
    for agent, name in samples.items():
        assert browser_name(agent) == name, agent
    assert browser_name(None) == "unknown browser"
