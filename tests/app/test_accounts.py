"""Accounts over HTTP: sign-up, sessions in signed cookies, CSRF, the sign-in limit, joining."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
from sqlalchemy import select, update

from app.db import SessionFactory
from app.models import SignInFailure, SiteRole, User, WebSession, utc_now
from app.settings import Settings
from app.web.sessions import FORGET_DRAFTS_COOKIE, SESSION_COOKIE
from graders.exercises import list_exercises
from tests.app.people import PASSWORD, make_course, make_user, sign_in, token_of
from tests.conftest import PRODUCT_PASSWORD_HASHER
from tests.servers import HTTP_TIMEOUT_SECONDS


def test_a_server_hashes_with_argon2id_at_its_default_cost() -> None:
    # The test process hashes cheaply (tests/conftest.py); a server hashes with these.
    stored = PRODUCT_PASSWORD_HASHER.hash(PASSWORD)
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$")
    assert PRODUCT_PASSWORD_HASHER.verify(stored, PASSWORD)


def test_sign_up_keeps_an_argon2_hash_and_signs_in_with_a_safe_cookie(
    client: httpx.Client, sessions: SessionFactory, settings: Settings
) -> None:
    token = token_of(client.get("/sign-up"))
    response = client.post(
        "/sign-up",
        data={
            "csrf_token": token,
            "email": " Ada@Example.org ",
            "name": "Ada Lovelace",
            "password": "a long enough password",
        },
    )
    assert response.status_code == 303, response.text
    cookie = next(
        h for h in response.headers.get_list("set-cookie") if h.startswith(SESSION_COOKIE)
    )
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "Secure" not in cookie  # plain http here; see the HTTPS test
    with sessions() as session:
        user = session.scalars(select(User)).one()
        assert user.email == "ada@example.org"
        assert user.password_hash.startswith("$argon2id$")
        web_session = session.scalars(select(WebSession)).one()
    # The cookie is the signed token; the database keeps only its hash.
    raw = client.cookies[SESSION_COOKIE]
    assert raw.split(".")[0] not in web_session.token_hash
    database = b"".join(p.read_bytes() for p in settings.data_dir.glob("loopgrade.db*"))
    assert b"a long enough password" not in database and raw.split(".")[0].encode() not in database

    home = client.get("/")
    assert "Ada Lovelace" in home.text and "Your courses" in home.text

    # A forged cookie (right token, wrong signature) is nobody.
    forged = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    forged.cookies.set(SESSION_COOKIE, raw.split(".")[0] + ".0000")
    assert "Ada Lovelace" not in forged.get("/").text

    # Signing out ends the session on the server: replaying the old cookie no longer works.
    out = client.post("/sign-out", data={"csrf_token": token_of(home)})
    assert out.status_code == 303
    # And tells the next page's script to forget this browser's drafts of signed-in learners.
    assert out.cookies.get(FORGET_DRAFTS_COOKIE) == "1"
    replay = httpx.Client(
        base_url=str(client.base_url), cookies={SESSION_COOKIE: raw}, timeout=HTTP_TIMEOUT_SECONDS
    )
    assert "Ada Lovelace" not in replay.get("/").text
    with sessions() as session:
        assert session.scalars(select(WebSession)).all() == []


def test_sign_up_refuses_bad_input_and_taken_emails(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "taken@example.org")
    for data, message in (
        ({"email": "not-an-email", "password": PASSWORD}, "not an email address"),
        ({"email": "new@example.org", "password": "short"}, "at least 10 characters"),
        ({"email": "TAKEN@example.org", "password": PASSWORD}, "already an account"),
    ):
        token = token_of(client.get("/sign-up"))
        response = client.post("/sign-up", data={**data, "name": "N", "csrf_token": token})
        assert response.status_code == 422
        assert message in response.text and 'role="alert"' in response.text
    with sessions() as session:
        assert len(session.scalars(select(User)).all()) == 1


def test_the_session_cookie_is_secure_behind_https(
    proxied_client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "sam@example.org")
    # LOOPGRADE_TRUSTED_PROXIES names 127.0.0.1: its X-Forwarded-Proto is believed.
    response = sign_in(proxied_client, "sam@example.org", headers={"X-Forwarded-Proto": "https"})
    assert response.status_code == 303
    cookie = next(
        h for h in response.headers.get_list("set-cookie") if h.startswith(SESSION_COOKIE)
    )
    assert "Secure" in cookie and "HttpOnly" in cookie


def test_wrong_passwords_then_a_pause_with_retry_after(
    client: httpx.Client, sessions: SessionFactory, settings: Settings
) -> None:
    make_user(sessions, "kim@example.org")
    for _ in range(settings.sign_in_max_failures):
        wrong = sign_in(client, "kim@example.org", "not the password")
        assert wrong.status_code == 401
        assert "Wrong email or password" in wrong.text
    # Now even the right password waits: the limit is checked first.
    paused = sign_in(client, "kim@example.org")
    assert paused.status_code == 429
    assert 0 < int(paused.headers["retry-after"]) <= settings.sign_in_window_seconds
    assert "Too many failed sign-ins" in paused.text
    # Another account is not paused by Kim's failures.
    make_user(sessions, "lee@example.org")
    assert sign_in(client, "lee@example.org").status_code == 303
    with sessions() as session:
        assert len(session.scalars(select(SignInFailure)).all()) == settings.sign_in_max_failures


def test_forms_without_this_browsers_csrf_token_are_refused(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "max@example.org")
    no_token = client.post("/sign-in", data={"email": "max@example.org", "password": PASSWORD})
    assert no_token.status_code == 403 and "Form expired" in no_token.text

    token = token_of(client.get("/sign-in"))
    other_site = client.post(
        "/sign-in",
        data={"email": "max@example.org", "password": PASSWORD, "csrf_token": token},
        headers={"Origin": "https://evil.example"},
    )
    assert other_site.status_code == 403

    assert sign_in(client, "max@example.org").status_code == 303
    # The anonymous token is no good once signed in: the session has its own.
    stale = client.post("/join", data={"join_code": "ABC", "csrf_token": token})
    assert stale.status_code == 403
    other_browser = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert (
        other_browser.post("/exercises/train-step", data={"code": "x", "csrf_token": token})
    ).status_code == 403


def test_join_a_course_with_its_code(client: httpx.Client, sessions: SessionFactory) -> None:
    make_user(sessions, "teacher@example.org", SiteRole.INSTRUCTOR)
    make_user(sessions, "jo@example.org")
    course_id = make_course(sessions, "teacher@example.org")
    with sessions() as session:
        from app.models import Course

        course = session.get(Course, course_id)
        assert course is not None
        code = course.join_code
    assert sign_in(client, "jo@example.org").status_code == 303

    assert client.get(f"/courses/{course_id}").status_code == 404  # not enrolled yet
    home = client.get("/")
    bad = client.post("/join", data={"join_code": "WRONG123", "csrf_token": token_of(home)})
    assert bad.status_code == 422 and "No course has the join code" in bad.text
    assert 'value="WRONG123"' in bad.text  # kept in the field, to correct
    # Typed loosely: lower case, spaces, a dash.
    loose = f" {code[:4].lower()}-{code[4:].lower()} "
    joined = client.post("/join", data={"join_code": loose, "csrf_token": token_of(home)})
    assert joined.status_code == 303 and joined.headers["location"] == f"/courses/{course_id}"

    page = client.get(f"/courses/{course_id}")
    assert page.status_code == 200
    assert page.text.count("Not started") == len(list_exercises())
    # The unit in order.
    titles = [t for t in ("Prove it", "None is not zero", "One training step", "Accumulate", "Fix")]
    positions = [page.text.index(t) for t in titles]
    assert positions == sorted(positions)
    assert "Gradebook" not in page.text  # a learner's view


def test_only_instructors_and_admins_create_courses(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "learner@example.org")
    make_user(sessions, "teacher@example.org", SiteRole.INSTRUCTOR)
    sign_in(client, "learner@example.org")
    home = client.get("/")
    assert 'action="/courses"' not in home.text
    refused = client.post("/courses", data={"name": "Mine", "csrf_token": token_of(home)})
    assert refused.status_code == 403

    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "teacher@example.org")
    created = teacher.post(
        "/courses",
        data={"name": "  Optimisers   in practice ", "csrf_token": token_of(teacher.get("/"))},
    )
    assert created.status_code == 303
    settings_page = teacher.get(created.headers["location"])
    assert "Optimisers in practice" in settings_page.text
    assert "Course created" in settings_page.text
    assert len(re.findall(r'name="assigned" value="[a-z-]+" checked', settings_page.text)) == len(
        list_exercises()
    )


def test_after_sign_in_only_a_path_on_this_site() -> None:
    from app.web.rendering import safe_next

    assert safe_next("/courses/abc/gradebook?sort=total") == "/courses/abc/gradebook?sort=total"
    for target in (
        "//evil.example",
        "/\t/evil.example",
        "https://evil.example",
        "/\\evil",
        "",
        None,
    ):
        assert safe_next(target) == "/"


def test_a_bad_join_code_on_sign_up_still_makes_the_account(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    token = token_of(client.get("/sign-up?code=NOPE1234"))
    made = client.post(
        "/sign-up",
        data={
            "email": "new@example.org",
            "name": "New",
            "password": PASSWORD,
            "join_code": "nope-1234",
            "csrf_token": token,
        },
    )
    assert made.status_code == 303
    home = client.get(made.headers["location"])
    assert home.status_code == 200
    assert "Your account is ready, but no course has the join code “nope-1234”" in home.text
    assert 'id="join_code"' in home.text and 'value="nope-1234"' in home.text
    assert "Your courses" in home.text  # signed in
    with sessions() as session:
        assert session.scalars(select(User).where(User.email == "new@example.org")).one()


def test_an_ended_session_says_so_on_the_sign_in_page(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "jo@example.org")
    assert sign_in(client, "jo@example.org").status_code == 303
    assert "ended" not in client.get("/sign-in").text  # signed in: sent on
    page_token = token_of(client.get("/"))
    with sessions.begin() as session:
        session.execute(update(WebSession).values(expires_at=utc_now() - timedelta(seconds=1)))
    # A form sent from a page opened before the session ended says why it was refused.
    refused = client.post("/join", data={"join_code": "X", "csrf_token": page_token})
    assert refused.status_code == 403 and "Your session ended before this form was sent" in (
        refused.text
    )
    redirect = client.get("/history?course=x")
    assert redirect.status_code == 303 and redirect.headers["location"].startswith("/sign-in")
    page = client.get(redirect.headers["location"])
    assert "Your session has ended" in page.text
    # The stale cookie is forgotten: the next visit is a plain sign-in page.
    assert "Your session has ended" not in client.get("/sign-in").text
    # Signing out when no longer signed in is no error either.
    out = client.post("/sign-out", data={"csrf_token": token_of(client.get("/sign-in"))})
    assert out.status_code == 303
