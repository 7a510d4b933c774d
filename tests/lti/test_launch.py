"""Login and launch against the fake platform: the happy path, and every check refusing."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from app.db import SessionFactory
from app.integrations.launch import LaunchCheck
from app.integrations.models import LtiPlatform, LtiResourceLink, LtiUser
from app.integrations.provisioning import LIS
from app.models import Course, CourseRole, Enrolment, User, WebSession
from tests.lti.conftest import LEEWAY_SECONDS, Launch, form_fields
from tests.lti.fake_platform import LTI, FakePlatform, follow_login, new_key


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    result: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return result


def assert_refused(response: httpx.Response, check: LaunchCheck) -> None:
    assert response.status_code == 400, response.text
    assert f'data-check="{check}"' in response.text, response.text
    assert "What to do" in response.text


def enter(client: httpx.Client, launched: httpx.Response) -> httpx.Response:
    """Follow the launch's redirects (ticket, session check) to the page it opens."""
    assert launched.status_code == 303, launched.text
    assert launched.headers["location"].startswith("/lti/enter?ticket=")
    base = str(launched.request.url).split("/lti/")[0]
    page = client.get(base + launched.headers["location"], follow_redirects=True)
    assert page.status_code == 200, page.text
    return page


def test_a_launch_provisions_the_learner_and_opens_the_exercise(
    launch: Launch, browser_client: httpx.Client, sessions: SessionFactory, platform: FakePlatform
) -> None:
    page = enter(browser_client, launch())
    assert page.url.path.endswith("/exercises/train-step")
    assert "Person learner-1" in page.text  # signed in as the platform's user
    # The LMS's session: it keeps the LMS page's origin (the launch's tool_platform.url), which
    # the frame's messages go to, and offers no "Sign out" (a password session does).
    assert 'action="/sign-out"' not in page.text
    assert f'<body data-lms-origin="{platform.url}">' in page.text
    # Framed by this site and the registered platform only.
    policy = page.headers["content-security-policy"]
    assert f"frame-ancestors 'self' {platform.url}" in policy and "*" not in policy
    with sessions() as session:
        lti_user = session.scalars(select(LtiUser)).one()
        user = session.get(User, lti_user.user_id)
        assert user is not None and user.email == "learner-1@lms.example"
        course = session.scalars(select(Course)).one()
        assert course.name == "Deep Learning 101"
        enrolment = session.scalars(select(Enrolment)).one()
        assert (enrolment.user_id, enrolment.role) == (user.id, CourseRole.LEARNER)
        link = session.scalars(select(LtiResourceLink)).one()
        assert session.scalars(select(LtiPlatform.frame_origins)).one() == [platform.url]
        assert link.exercise_id == "train-step"
        assert link.lineitem_url and link.lineitem_url.endswith("/lineitems/1/lineitem?course=7")
        assert session.scalars(select(WebSession.lms_origin)).one() == platform.url


def test_login_by_post_works_too(launch: Launch, browser_client: httpx.Client) -> None:
    enter(browser_client, launch(method="POST"))


def test_an_instructor_role_makes_a_course_instructor(
    launch: Launch, platform: FakePlatform, sessions: SessionFactory
) -> None:
    platform.roles = [LIS + "membership/Instructor#TeachingAssistant"]
    platform.subject = "teacher-1"
    assert launch().status_code == 303
    with sessions() as session:
        assert session.scalars(select(Enrolment.role)).one() == CourseRole.INSTRUCTOR


def test_a_platform_cannot_sign_in_as_a_local_account_by_its_email(
    launch: Launch, platform: FakePlatform, sessions: SessionFactory
) -> None:
    from app.people.accounts import create_user

    with sessions.begin() as session:
        create_user(session, email="admin@site.example", name="Admin", password="a long password")
    platform.claims_override = {"email": "admin@site.example"}
    assert launch().status_code == 303
    with sessions() as session:
        lti_user = session.scalars(select(LtiUser)).one()
        user = session.get(User, lti_user.user_id)
        assert user is not None and user.email.endswith("@lti.invalid")


def resign(token: str, platform: FakePlatform, key: Any = None, **changes: Any) -> str:
    claims = claims_of(token)
    claims.update(changes)
    return platform.sign(claims, key)


def test_a_bad_signature_is_refused(launch: Launch) -> None:
    def flip(token: str) -> str:
        head, payload, signature = token.split(".")
        return f"{head}.{payload}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"

    assert_refused(launch(flip), LaunchCheck.SIGNATURE)


def test_an_altered_payload_is_refused(launch: Launch) -> None:
    def alter(token: str) -> str:
        head, _, signature = token.split(".")
        claims = claims_of(token)
        claims["sub"] = "someone-else"
        body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        return f"{head}.{body}.{signature}"

    assert_refused(launch(alter), LaunchCheck.SIGNATURE)


def test_a_key_the_platform_never_published_is_refused(
    launch: Launch, platform: FakePlatform
) -> None:
    stranger = new_key()
    assert_refused(launch(lambda t: resign(t, platform, stranger)), LaunchCheck.SIGNING_KEY)


def test_a_rotated_platform_key_is_fetched_once_more(
    launch: Launch, platform: FakePlatform, browser_client: httpx.Client
) -> None:
    enter(browser_client, launch())  # the tool now caches the JWKS with the first key
    platform.rotate()
    enter(browser_client, launch())


@pytest.mark.parametrize(
    ("changes", "check"),
    [
        ({"exp": -LEEWAY_SECONDS - 60}, LaunchCheck.EXPIRY),
        ({"iat": LEEWAY_SECONDS + 60}, LaunchCheck.ISSUED_AT),
    ],
)
def test_times_beyond_the_leeway_are_refused(
    launch: Launch, platform: FakePlatform, changes: dict[str, int], check: LaunchCheck
) -> None:
    now = int(time.time())
    absolute = {name: now + offset for name, offset in changes.items()}
    assert_refused(launch(lambda t: resign(t, platform, **absolute)), check)


def test_times_within_the_leeway_are_accepted(launch: Launch, platform: FakePlatform) -> None:
    now = int(time.time())
    # The platform's clock runs 30 s ahead: issued "in the future", expired by its own clock.
    early = launch(lambda t: resign(t, platform, iat=now + 30, exp=now - 10))
    assert early.status_code == 303, early.text


def test_a_replayed_launch_is_refused(
    launch: Launch, browser_client: httpx.Client, platform: FakePlatform
) -> None:
    first = launch()
    assert first.status_code == 303
    original = first.request.content.decode()
    replay = browser_client.post(
        f"{platform.tool_url}/lti/launch",
        content=original,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert_refused(replay, LaunchCheck.STATE)


def test_a_refused_launch_uses_up_its_state(
    browser_client: httpx.Client, platform: FakePlatform
) -> None:
    fields = form_fields(follow_login(browser_client, platform).text)
    altered = {**fields, "id_token": fields["id_token"][:-4] + "AAAA"}
    refused = browser_client.post(f"{platform.tool_url}/lti/launch", data=altered)
    assert_refused(refused, LaunchCheck.SIGNATURE)
    # The state was used by the refused try (kept although the answer is an error).
    again = browser_client.post(f"{platform.tool_url}/lti/launch", data=fields)
    assert_refused(again, LaunchCheck.STATE)


def test_a_replayed_id_token_with_a_new_state_is_refused(
    launch: Launch, platform: FakePlatform
) -> None:
    captured: list[str] = []

    def keep(token: str) -> str:
        captured.append(token)
        return token

    assert launch(keep).status_code == 303
    assert_refused(launch(lambda _: captured[0]), LaunchCheck.NONCE)


def test_an_unknown_state_is_refused(platform: FakePlatform, browser_client: httpx.Client) -> None:
    response = browser_client.post(
        f"{platform.tool_url}/lti/launch", data={"id_token": "a.b.c", "state": "made-up"}
    )
    assert_refused(response, LaunchCheck.STATE)


@pytest.mark.parametrize(
    ("override", "check"),
    [
        ({"aud": "another-tool"}, LaunchCheck.AUDIENCE),
        ({"aud": ["fake-client", "another-tool"]}, LaunchCheck.AUDIENCE),  # no azp
        ({"aud": ["fake-client", "another-tool"], "azp": "another-tool"}, LaunchCheck.AUDIENCE),
        ({"iss": "https://other.example"}, LaunchCheck.ISSUER),
        ({LTI + "deployment_id": "deployment-unknown"}, LaunchCheck.DEPLOYMENT),
        ({LTI + "message_type": "LtiSubmissionReviewRequest"}, LaunchCheck.MESSAGE_TYPE),
        ({LTI + "version": "1.1"}, LaunchCheck.VERSION),
        ({"sub": None}, LaunchCheck.REQUIRED_CLAIMS),
        ({LTI + "roles": None}, LaunchCheck.REQUIRED_CLAIMS),
        ({LTI + "resource_link": None}, LaunchCheck.REQUIRED_CLAIMS),
        ({LTI + "resource_link": {"title": "no id"}}, LaunchCheck.REQUIRED_CLAIMS),
        ({LTI + "target_link_uri": None}, LaunchCheck.REQUIRED_CLAIMS),
        ({"exp": None}, LaunchCheck.EXPIRY),
        ({"nonce": "not-the-one"}, LaunchCheck.NONCE),
    ],
    ids=lambda value: str(value)[:60],
)
def test_bad_claims_are_refused(
    launch: Launch, platform: FakePlatform, override: dict[str, Any], check: LaunchCheck
) -> None:
    platform.claims_override = override
    assert_refused(launch(), check)


def test_several_audiences_with_our_azp_are_accepted(
    launch: Launch, platform: FakePlatform
) -> None:
    platform.claims_override = {"aud": ["another-tool", "fake-client"], "azp": "fake-client"}
    assert launch().status_code == 303


def test_a_login_from_an_unregistered_issuer_is_refused(
    platform: FakePlatform, browser_client: httpx.Client
) -> None:
    params = {**platform.login_params(), "iss": "https://unknown.example"}
    response = browser_client.get(f"{platform.tool_url}/lti/login", params=params)
    assert_refused(response, LaunchCheck.LOGIN_REQUEST)
    assert "loopgrade lti platforms add" in response.text


def test_a_login_without_login_hint_is_refused(
    platform: FakePlatform, browser_client: httpx.Client
) -> None:
    params = {**platform.login_params(), "login_hint": ""}
    response = browser_client.get(f"{platform.tool_url}/lti/login", params=params)
    assert_refused(response, LaunchCheck.LOGIN_REQUEST)
