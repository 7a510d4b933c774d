"""Personal access tokens (app/people/tokens.py) and the learner's API they open (/api/v1/me):
the tokens page, scope, revocation and expiry, one learner's token against another's work,
the web form's rules, and the practice kit that must hold no hidden case."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from app.courses.membership import set_assignment
from app.db import SessionFactory
from app.models import (
    LatePolicy,
    PersonalToken,
    ScoringPolicy,
    SignInFailure,
    Submission,
    User,
    WebSession,
    utc_now,
)
from app.people.accounts import NO_PASSWORD
from app.people.recovery import issue_reset_link
from app.people.tokens import (
    MAX_DEAD_TOKENS_LISTED,
    MAX_LIVE_TOKENS,
    TokenError,
    create_personal_token,
)
from app.settings import Settings
from graders.exercises import get_exercise
from graders.kinds import SANDBOX_PROGRAM
from tests.app.conftest import CORRECT_CODE, EXERCISE, wait_until_finished
from tests.app.people import PASSWORD, graded, make_course, make_user, post_form, sign_in
from tests.app.test_events import read_events
from tests.graders.test_hidden import secrets
from tests.servers import HTTP_TIMEOUT_SECONDS


@contextmanager
def browser(server_url: str, email: str) -> Iterator[httpx.Client]:
    """A browser signed in as `email`."""
    with httpx.Client(base_url=server_url, timeout=HTTP_TIMEOUT_SECONDS) as client:
        assert sign_in(client, email).status_code == 303
        yield client


def new_token(client: httpx.Client, name: str = "laptop", lifetime_days: str = "30") -> str:
    """A token made on the page by a browser signed in with PASSWORD (asked again)."""
    form = {"name": name, "lifetime_days": lifetime_days, "password": PASSWORD}
    page = post_form(client, "/account/tokens", "/account/tokens", form)
    assert page.status_code == 200, page.text
    start = page.text.index("data-new-token")
    secret = page.text[page.text.index(">", start) + 1 : page.text.index("</code>", start)]
    assert secret.startswith("lgp_")
    return secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def people(sessions: SessionFactory, server_url: str) -> dict[str, Any]:
    """Ann (instructor), Ben and Cat (learners in Ann's course, which does not set
    fix-the-loop)."""
    from app.models import SiteRole

    make_user(sessions, "ann@example.org", SiteRole.INSTRUCTOR)
    ben = make_user(sessions, "ben@example.org")
    cat = make_user(sessions, "cat@example.org")
    course = make_course(sessions, "ann@example.org", "ben@example.org", "cat@example.org")
    with sessions.begin() as session:
        set_assignment(
            session,
            course_id=course,
            exercise_id="fix-the-loop",
            assigned=False,
            due_at=None,
            late_policy=LatePolicy.PENALTY,
            late_penalty_percent_per_day=0,
            scoring_policy=ScoringPolicy.BEST,
        )
    return {"course": course, "ben": ben, "cat": cat}


def test_the_tokens_page_shows_a_token_once_stores_its_hash_and_revokes_it(
    server_url: str, people: dict[str, Any], sessions: SessionFactory
) -> None:
    with browser(server_url, "ben@example.org") as ben:
        secret = new_token(ben, "my laptop", "7")
        listing = ben.get("/account/tokens")
        assert "my laptop" in listing.text
        assert secret not in listing.text  # shown once, on the answer that made it
        with sessions() as session:
            row = session.query(PersonalToken).one()
            assert secret not in (row.token_hash, row.name)
            assert row.expires_at - row.created_at == timedelta(days=7)
            assert row.last_used_at is None

        me = httpx.get(f"{server_url}/api/v1/me/exercises", headers=bearer(secret))
        assert me.status_code == 200, me.text
        assert me.json()["email"] == "ben@example.org"
        with sessions() as session:
            assert session.query(PersonalToken).one().last_used_at is not None

        revoked = post_form(ben, "/account/tokens", f"/account/tokens/{row.id}/revoke", {})
        assert revoked.status_code == 303
        refused = httpx.get(f"{server_url}/api/v1/me/exercises", headers=bearer(secret))
        assert refused.status_code == 401
        assert "revoked" in refused.json()["detail"]
        assert "/account/tokens" in refused.json()["detail"]
        assert 'data-state="revoked"' in ben.get("/account/tokens").text


def test_a_lifetime_over_the_maximum_and_an_empty_name_are_refused(
    server_url: str, people: dict[str, Any], settings: Settings
) -> None:
    settings.personal_token_max_days = 90
    with browser(server_url, "ben@example.org") as ben:
        page = ben.get("/account/tokens")
        assert 'value="365"' not in page.text and 'value="90"' in page.text
        too_long = post_form(
            ben,
            "/account/tokens",
            "/account/tokens",
            {"name": "x", "lifetime_days": "365", "password": PASSWORD},
        )
        assert too_long.status_code == 422
        assert "7, 30, 90 days" in too_long.text
        unnamed = post_form(
            ben,
            "/account/tokens",
            "/account/tokens",
            {"name": "  ", "lifetime_days": "30", "password": PASSWORD},
        )
        assert unnamed.status_code == 422
        assert "data-new-token" not in unnamed.text


def test_the_tokens_page_needs_a_signed_in_user_and_its_form_a_csrf_token(
    client: httpx.Client, people: dict[str, Any]
) -> None:
    assert client.get("/account/tokens").status_code == 303
    with httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS) as ben:
        sign_in(ben, "ben@example.org")
        forged = ben.post("/account/tokens", data={"name": "x", "lifetime_days": "30"})
        assert forged.status_code == 403


def test_an_expired_token_gets_a_401_that_says_so(
    server_url: str, people: dict[str, Any], sessions: SessionFactory
) -> None:
    with browser(server_url, "ben@example.org") as ben:
        secret = new_token(ben)
    with sessions.begin() as session:
        session.query(PersonalToken).one().expires_at = utc_now() - timedelta(seconds=1)
    refused = httpx.get(f"{server_url}/api/v1/me/exercises", headers=bearer(secret))
    assert refused.status_code == 401
    assert refused.json()["detail"].startswith("this token expired on ")
    assert refused.headers["www-authenticate"].startswith("Bearer")
    for headers in ({}, bearer("lgp_nonsense")):
        unknown = httpx.get(f"{server_url}/api/v1/me/exercises", headers=headers)
        assert unknown.status_code == 401
        assert "/account/tokens" in unknown.json()["detail"]


def test_a_token_submits_as_its_learner_and_the_submission_says_it_came_by_token(
    server_url: str, people: dict[str, Any], sessions: SessionFactory
) -> None:
    with browser(server_url, "ben@example.org") as ben:
        secret = new_token(ben)
    with httpx.Client(base_url=server_url, headers=bearer(secret), timeout=60) as api:
        body = {"exercise": EXERCISE, "course": people["course"], "code": CORRECT_CODE}
        first = api.post("/api/v1/me/submissions", json=body, headers={"Idempotency-Key": "k1"})
        again = api.post("/api/v1/me/submissions", json=body, headers={"Idempotency-Key": "k1"})
        assert first.status_code == again.status_code == 202, first.text
        assert first.json()["id"] == again.json()["id"]
        assert again.headers["idempotent-replayed"] == "true"
        result = wait_until_finished(
            api, first.headers["location"], {}, statuses=("graded", "error")
        )
        assert result["status"] == "graded"
        assert result["score"] == result["max_score"]
        assert result["diagnosis_text"] and result["by_token"] is True
        assert result["course"] == people["course"]
        assert result["charts_svg"] and result["charts_svg"][0].startswith("<svg")
        states = api.get("/api/v1/me/exercises").json()
        (course,) = states["courses"]
        states_by_id = {e["id"]: e["state"] for e in course["exercises"]}
        assert states_by_id[EXERCISE] == "solved" and "fix-the-loop" not in states_by_id
    with sessions() as session:
        row = session.get(Submission, first.json()["id"])
        assert row is not None
        assert row.user_id == people["ben"] and row.learner == "ben@example.org"
        assert row.personal_token_id == session.query(PersonalToken).one().id


def test_one_learners_token_never_reads_anothers_work(
    server_url: str, people: dict[str, Any], sessions: SessionFactory
) -> None:
    cats = graded(sessions, user_id=people["cat"], course_id=people["course"], score=4)
    practice = graded(sessions, user_id=people["cat"], course_id=None, score=4)
    bens = graded(sessions, user_id=people["ben"], course_id=None, score=10)
    with browser(server_url, "ben@example.org") as ben:
        secret = new_token(ben)
    with browser(server_url, "ann@example.org") as ann:
        instructor_secret = new_token(ann)
    for token in (secret, instructor_secret):
        for submission_id in (cats, practice):
            for path in ("", "/events"):
                answer = httpx.get(
                    f"{server_url}/api/v1/me/submissions/{submission_id}{path}",
                    headers=bearer(token),
                )
                assert answer.status_code == 404, answer.text
        listed = httpx.get(f"{server_url}/api/v1/me/submissions", headers=bearer(token)).json()
        assert {s["id"] for s in listed} <= {bens}
    assert (
        httpx.get(f"{server_url}/api/v1/me/submissions/{bens}", headers=bearer(secret)).status_code
        == 200
    )


def test_the_api_stream_ends_with_the_submissions_api_address_not_the_page(
    server_url: str, people: dict[str, Any], sessions: SessionFactory
) -> None:
    """The API's progress stream is the page's, but its `done` says where the API reads the
    result: no page HTML for a client that reads JSON."""
    bens = graded(sessions, user_id=people["ben"], course_id=None, score=10)
    with browser(server_url, "ben@example.org") as ben:
        secret = new_token(ben)
    with httpx.stream(
        "GET",
        f"{server_url}/api/v1/me/submissions/{bens}/events",
        headers=bearer(secret),
        timeout=HTTP_TIMEOUT_SECONDS,
    ) as response:
        assert response.status_code == 200
        seen = list(read_events(response.iter_lines()))
    assert seen == [("done", {"status": "graded", "url": f"/api/v1/me/submissions/{bens}"})]
    answer = httpx.get(f"{server_url}{seen[0][1]['url']}", headers=bearer(secret))
    assert answer.status_code == 200 and answer.json()["id"] == bens


def test_tokens_and_course_api_keys_do_not_open_each_others_api(
    server_url: str, people: dict[str, Any], auth: dict[str, str]
) -> None:
    with browser(server_url, "ben@example.org") as ben:
        secret = new_token(ben)
    assert httpx.get(f"{server_url}/api/v1/me/exercises", headers=auth).status_code == 401
    with_token = httpx.get(f"{server_url}/api/v1/submissions", headers=bearer(secret))
    assert with_token.status_code == 401


def test_the_web_forms_rules_apply_to_a_token(
    server_url: str, people: dict[str, Any], sessions: SessionFactory, settings: Settings
) -> None:
    with browser(server_url, "ben@example.org") as ben:
        secret = new_token(ben)
    api = httpx.Client(base_url=server_url, headers=bearer(secret), timeout=60)
    not_set = api.post(
        "/api/v1/me/submissions",
        json={"exercise": "fix-the-loop", "course": people["course"], "code": CORRECT_CODE},
    )
    assert not_set.status_code == 404
    assert "does not set the exercise" in not_set.json()["detail"]
    outsider = make_user(sessions, "dan@example.org")
    assert outsider
    with browser(server_url, "dan@example.org") as dan:
        dans = new_token(dan)
    not_mine = httpx.post(
        f"{server_url}/api/v1/me/submissions",
        headers=bearer(dans),
        json={"exercise": EXERCISE, "course": people["course"], "code": CORRECT_CODE},
    )
    assert not_mine.status_code == 404
    wrong_type = api.post("/api/v1/me/submissions", json={"exercise": EXERCISE, "code": 3})
    assert wrong_type.status_code == 422

    settings.submission_rate_limit = 1
    settings.submission_rate_window_seconds = 600
    graded(sessions, user_id=people["ben"], course_id=None, score=0, learner="ben@example.org")
    limited = api.post("/api/v1/me/submissions", json={"exercise": EXERCISE, "code": CORRECT_CODE})
    assert limited.status_code == 429
    assert 500 < int(limited.headers["retry-after"]) <= 600
    api.close()


@pytest.mark.parametrize("exercise_id", ["train-step", "accumulate-microbatches", "fix-the-loop"])
def test_the_practice_kit_holds_no_hidden_case(
    server_url: str, people: dict[str, Any], exercise_id: str
) -> None:
    with browser(server_url, "ben@example.org") as ben:
        secret = new_token(ben)
    kit = httpx.get(
        f"{server_url}/api/v1/me/exercises/{exercise_id}/practice-kit",
        headers=bearer(secret),
        timeout=60,
    )
    assert kit.status_code == 200, kit.text
    body = kit.json()
    exercise = get_exercise(exercise_id)
    visible = [case.id for case in exercise.cases if not case.hidden]
    assert [case["id"] for case in body["cases"]] == visible
    assert sorted(body["reference"]) == sorted(visible)
    # Data only: which harness (the client ships its own), never its code.
    assert body["harness_sha256"] == hashlib.sha256(SANDBOX_PROGRAM.encode()).hexdigest()
    assert "harness" not in body
    # Every value in the answer, whole (a seed of 17 is not betrayed by 0.1738).
    values = set(leaves({k: v for k, v in body.items() if k != "harness_sha256"}))
    # A hidden case may share a parameter with a visible one (lr 0.05 in both): no secret.
    shared = set(leaves([case.harness_spec() for case in exercise.cases if not case.hidden]))
    hidden_secrets = set(secrets(exercise)) - shared
    assert not hidden_secrets & values
    # The check itself can fail: the hidden cases' own values would be found.
    hidden = [case.harness_spec() for case in exercise.cases if case.hidden]
    assert hidden_secrets & set(leaves(hidden))


def test_the_practice_check_judges_a_hostile_trace_in_words_and_stores_nothing(
    server_url: str, people: dict[str, Any], sessions: SessionFactory
) -> None:
    """`loopgrade-client check`'s trace, judged by the grader: forged, garbage or missing, it is
    a learner's result in words or a 422, never a 500, and never a stored submission."""
    with browser(server_url, "ben@example.org") as ben:
        secret = new_token(ben)
    url = f"{server_url}/api/v1/me/exercises/{EXERCISE}/practice-check"

    def check(body: Any) -> httpx.Response:
        return httpx.post(url, json=body, headers=bearer(secret), timeout=60)

    for hostile in (
        {"status": "ran", "cases": "all"},
        {"status": "ran", "cases": [{"id": "basic", "records": [{"weight": "x" * 100}]}]},
        {"status": "ran", "cases": [{"id": "hidden-seed", "records": [], "final": {}}]},
        {"status": "load-error", "error": {"type": "X" * 5000, "message": "**full marks**"}},
        {},
    ):
        judged = check({"trace": hostile})
        assert judged.status_code == 200, judged.text
        body = judged.json()
        assert body["diagnosis"] != "correct"
        assert not all(c["passed"] for c in body["checks"])
    garbage: list[dict[str, Any]] = [{"trace": []}, {"trace": "x"}, {}, {"trace": {}, "score": 10}]
    for body in garbage:
        assert check(body).status_code == 422
    deep = '{"trace": {"status": "ran", "cases": ' + "[" * 5000 + "]" * 5000 + "}}"
    nested = httpx.post(
        url,
        content=deep,
        headers={**bearer(secret), "Content-Type": "application/json"},
        timeout=60,
    )
    assert nested.status_code == 400
    huge = {"trace": {"status": "ran", "cases": [{"id": "basic", "records": [{"x": 1}] * 200000}]}}
    assert check(huge).status_code == 413
    unknown = httpx.post(
        f"{server_url}/api/v1/me/exercises/nope/practice-check",
        json={"trace": {}},
        headers=bearer(secret),
        timeout=60,
    )
    assert unknown.status_code == 404
    assert httpx.post(url, json={"trace": {}}, timeout=60).status_code == 401
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Submission)) == 0


def leaves(value: Any) -> Iterator[str]:
    """Every string and number in a JSON value, as the secrets are written."""
    if isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item)
    elif isinstance(value, float):
        yield from (repr(value), f"{value:g}", f"{value:.6g}", f"{value:.4g}")
    elif value is not None:
        yield str(value)


def _alive(server_url: str, secret: str) -> bool:
    answer = httpx.get(f"{server_url}/api/v1/me/exercises", headers=bearer(secret))
    assert answer.status_code in (200, 401), answer.text
    return answer.status_code == 200


def test_making_a_token_asks_for_the_password_again(
    server_url: str, people: dict[str, Any], sessions: SessionFactory
) -> None:
    with browser(server_url, "ben@example.org") as ben:
        for password in ("", "not the password"):
            form = {"name": "stolen", "lifetime_days": "30", "password": password}
            refused = post_form(ben, "/account/tokens", "/account/tokens", form)
            assert refused.status_code == 401
            assert "The password is not right." in refused.text
            assert "data-new-token" not in refused.text
        with sessions() as session:
            assert session.scalars(select(PersonalToken)).all() == []
            # Counted as failed sign-ins: the password cannot be guessed here without a brake.
            assert len(session.scalars(select(SignInFailure)).all()) == 2
        assert _alive(server_url, new_token(ben))


def test_an_lms_account_makes_a_token_only_just_after_a_launch(
    server_url: str, people: dict[str, Any], sessions: SessionFactory
) -> None:
    with browser(server_url, "cat@example.org") as cat:
        with sessions.begin() as session:
            session.execute(
                update(User).where(User.id == people["cat"]).values(password_hash=NO_PASSWORD)
            )
        page = cat.get("/account/tokens")
        assert 'name="password"' not in page.text
        assert "within 10 minutes of opening the activity" in page.text
        form = {"name": "laptop", "lifetime_days": "30"}
        assert post_form(cat, "/account/tokens", "/account/tokens", form).status_code == 200
        with sessions.begin() as session:
            session.execute(update(WebSession).values(created_at=utc_now() - timedelta(minutes=11)))
        stale = post_form(cat, "/account/tokens", "/account/tokens", form)
        assert stale.status_code == 401
        assert "open the activity from the LMS again" in stale.text


@pytest.mark.parametrize("ending", ["sign-out-others", "password", "reset", "revoke-all"])
def test_tokens_end_with_the_sessions(
    server_url: str, people: dict[str, Any], sessions: SessionFactory, ending: str
) -> None:
    with browser(server_url, "ben@example.org") as ben:
        secrets_made = [new_token(ben, "laptop"), new_token(ben, "notebook")]
        assert all(_alive(server_url, secret) for secret in secrets_made)
        if ending == "sign-out-others":
            done = post_form(ben, "/account", "/account/sign-out-others", {})
        elif ending == "password":
            new = "another long password"
            form = {"current_password": PASSWORD, "new_password": new, "new_password_again": new}
            done = post_form(ben, "/account", "/account/password", form)
        elif ending == "reset":
            with sessions.begin() as session:
                user = session.get_one(User, people["ben"])
                token = issue_reset_link(session, user, client_address="t", max_age_seconds=60)
            new = "another long password"
            form = {"token": token.token, "password": new, "password_again": new}
            done = post_form(ben, "/forgot-password", "/reset-password", form)
        else:
            done = post_form(ben, "/account/tokens", "/account/tokens/revoke-all", {})
        assert done.status_code == 303, done.text
        if ending != "revoke-all":
            assert "your personal tokens are revoked" in ben.get(done.headers["location"]).text
        assert not any(_alive(server_url, secret) for secret in secrets_made)
        assert ben.get("/account/tokens").text.count('data-state="revoked"') == 2


def test_an_account_holds_a_bounded_number_of_live_tokens(
    server_url: str, people: dict[str, Any], sessions: SessionFactory
) -> None:
    with sessions.begin() as session:
        user = session.get_one(User, people["ben"])
        for number in range(MAX_LIVE_TOKENS + 30):
            token, _ = create_personal_token(
                session, user, name=f"t{number}", lifetime_days=30, max_days=30
            )
            if number < 30:  # dead ones, which do not count
                token.revoked_at = utc_now()
        with pytest.raises(TokenError, match=f"you have {MAX_LIVE_TOKENS} live tokens"):
            create_personal_token(session, user, name="one more", lifetime_days=30, max_days=30)
    with browser(server_url, "ben@example.org") as ben:
        form = {"name": "one more", "lifetime_days": "30", "password": PASSWORD}
        refused = post_form(ben, "/account/tokens", "/account/tokens", form)
        assert refused.status_code == 422
        assert "revoke one you no longer use first" in refused.text
        # The page lists every live token and only the newest of the dead ones.
        listing = ben.get("/account/tokens").text
        assert listing.count('data-state="live"') == MAX_LIVE_TOKENS
        assert listing.count('data-state="revoked"') == MAX_DEAD_TOKENS_LISTED
        post_form(ben, "/account/tokens", "/account/tokens/revoke-all", {})
        assert _alive(server_url, new_token(ben))
