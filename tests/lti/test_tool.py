"""The tool's side: Deep Linking answered with a signed response, its keys and rotation, the
configuration and admin page, the CLI."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from datetime import timedelta

import httpx
from sqlalchemy import select

from app.access import load_secret_key, sign
from app.courses.exercise_list import remove_exercise
from app.courses.membership import find_course
from app.db import SessionFactory
from app.integrations.keys import KEY_RETENTION, key_sealing, rotate_tool_key
from app.integrations.models import LtiContext, LtiPlatform, LtiToolKey, LtiUser
from app.lti.deep_linking import DeepLinkRequest
from app.models import SiteRole, User, utc_now
from app.people.accounts import create_user
from app.settings import Settings
from graders.exercises import list_exercises
from tests.app.conftest import loopgrade
from tests.lti.conftest import Launch, form_fields
from tests.lti.fake_platform import DL, INSTRUCTOR, LTI, FakePlatform
from tests.lti.test_launch import enter
from tests.servers import HTTP_TIMEOUT_SECONDS


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match, page
    return match[1]


def test_deep_linking_answers_a_signed_item_with_a_line_item(
    launch: Launch, platform: FakePlatform, browser_client: httpx.Client
) -> None:
    platform.message_type = "LtiDeepLinkingRequest"
    platform.roles = [INSTRUCTOR]
    platform.subject = "teacher-1"
    chooser = enter(browser_client, launch())
    assert chooser.url.path == "/lti/deep-link"
    fields = form_fields(chooser.text)
    answer = browser_client.post(
        f"{platform.tool_url}/lti/deep-link",
        data={
            "csrf_token": csrf_of(chooser.text),
            "deep_link": fields["deep_link"],
            "exercise": "train-step",
        },
    )
    assert answer.status_code == 200, answer.text
    # The page posts to the platform, which its CSP must allow.
    assert platform.url in answer.headers["content-security-policy"]
    action = re.search(r'action="([^"]+)" id="deep-link-return"', answer.text)
    assert action and action[1] == f"{platform.url}/deep-link-return"
    returned = browser_client.post(action[1], data={"JWT": form_fields(answer.text)["JWT"]})
    assert returned.status_code == 200, returned.text

    (claims,) = platform.deep_link_responses  # verified against the tool's JWKS
    assert claims["iss"] == platform.client_id
    assert claims["aud"] == platform.issuer
    assert claims[LTI + "message_type"] == "LtiDeepLinkingResponse"
    assert claims[LTI + "version"] == "1.3.0"
    assert claims[LTI + "deployment_id"] == platform.deployment_id
    assert claims[DL + "data"] == "opaque-data-7"
    (item,) = claims[DL + "content_items"]
    assert item["type"] == "ltiResourceLink"
    # The registered launch URL exactly, no query string; the exercise rides in custom.
    assert item["url"] == f"{platform.tool_url}/lti/launch"
    assert item["custom"] == {"exercise": "train-step"}
    assert item["lineItem"]["resourceId"] == "train-step"
    assert item["lineItem"]["scoreMaximum"] > 0

    # The platform now launches the link it made, with that custom parameter.
    platform.message_type = "LtiResourceLinkRequest"
    platform.roles = ["http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"]
    platform.subject = "learner-2"
    platform.custom = item["custom"]
    page = enter(browser_client, launch())
    assert page.url.path.endswith("/exercises/train-step")


def _deep_link_chooser(
    launch: Launch, platform: FakePlatform, client: httpx.Client, subject: str
) -> httpx.Response:
    platform.message_type = "LtiDeepLinkingRequest"
    platform.roles = [INSTRUCTOR]
    platform.subject = subject
    chooser = enter(client, launch(client=client))
    assert chooser.url.path == "/lti/deep-link"
    return chooser


def test_deep_linking_offers_the_course_s_exercise_list_only(
    launch: Launch,
    platform: FakePlatform,
    browser_client: httpx.Client,
    sessions: SessionFactory,
) -> None:
    """The launch's context maps to a course: an exercise removed from it is neither offered
    nor accepted (422), as on the link page."""
    chooser = _deep_link_chooser(launch, platform, browser_client, "teacher-1")
    offered = re.findall(r'<option value="([^"]+)"', chooser.text)
    assert offered == [e.id for e in list_exercises()]
    removed = offered[1]
    with sessions.begin() as session:
        course_id = session.scalars(
            select(LtiContext.course_id).where(LtiContext.context_id == "course-7")
        ).one()
        course, by = (
            find_course(session, course_id),
            session.get(User, _user_of(sessions, "teacher-1")),
        )
        assert course is not None and by is not None
        remove_exercise(session, course=course, exercise_id=removed, by=by)
    chooser = _deep_link_chooser(launch, platform, browser_client, "teacher-1")
    offered = re.findall(r'<option value="([^"]+)"', chooser.text)
    assert offered == [e.id for e in list_exercises() if e.id != removed]
    answer = browser_client.post(
        f"{platform.tool_url}/lti/deep-link",
        data={
            "csrf_token": csrf_of(chooser.text),
            "deep_link": form_fields(chooser.text)["deep_link"],
            "exercise": removed,
        },
    )
    assert answer.status_code == 422 and "The course has no exercise" in answer.text
    assert "JWT" not in form_fields(answer.text) and not platform.deep_link_responses


def test_a_deep_linking_request_serves_only_the_instructor_who_launched(
    launch: Launch, platform: FakePlatform, browser_client: httpx.Client
) -> None:
    mine = _deep_link_chooser(launch, platform, browser_client, "teacher-1")
    with httpx.Client(timeout=HTTP_TIMEOUT_SECONDS) as other_browser:
        theirs = _deep_link_chooser(launch, platform, other_browser, "teacher-2")
        # teacher-2, signed in, replays teacher-1's signed request (from a shared URL or log).
        stolen = form_fields(mine.text)["deep_link"]
        page = other_browser.get(f"{platform.tool_url}/lti/deep-link", params={"request": stolen})
        assert page.status_code == 400 and "started by someone else" in page.text
        answer = other_browser.post(
            f"{platform.tool_url}/lti/deep-link",
            data={
                "csrf_token": csrf_of(theirs.text),
                "deep_link": stolen,
                "exercise": "train-step",
            },
        )
        assert answer.status_code == 400
        assert "JWT" not in form_fields(answer.text)
    # Its owner still can.
    answer = browser_client.post(
        f"{platform.tool_url}/lti/deep-link",
        data={"csrf_token": csrf_of(mine.text), "deep_link": stolen, "exercise": "train-step"},
    )
    assert answer.status_code == 200 and "JWT" in form_fields(answer.text)


def test_a_deep_linking_request_expires(
    launch: Launch,
    platform: FakePlatform,
    browser_client: httpx.Client,
    settings: Settings,
    sessions: SessionFactory,
) -> None:
    chooser = _deep_link_chooser(launch, platform, browser_client, "teacher-1")
    secret_key = load_secret_key(settings)
    live = DeepLinkRequest.from_signed(
        secret_key, form_fields(chooser.text)["deep_link"], user_id=_user_of(sessions, "teacher-1")
    )
    assert live is not None
    expired = dataclasses.replace(live, expires_at=int(time.time()) - 1).to_signed(secret_key)
    answer = browser_client.post(
        f"{platform.tool_url}/lti/deep-link",
        data={"csrf_token": csrf_of(chooser.text), "deep_link": expired, "exercise": "train-step"},
    )
    assert answer.status_code == 400 and "not valid any more" in answer.text
    # A request signed before requests carried a user and an expiry is refused too.
    old = {k: v for k, v in dataclasses.asdict(live).items() if k not in ("user_id", "expires_at")}
    old_signed = sign(secret_key, "lti-deep-link", json.dumps(old))
    page = browser_client.get(f"{platform.tool_url}/lti/deep-link", params={"request": old_signed})
    assert page.status_code == 400


def _user_of(sessions: SessionFactory, subject: str) -> str:
    with sessions() as session:
        return session.scalars(select(LtiUser.user_id).where(LtiUser.subject == subject)).one()


def test_a_learner_cannot_use_deep_linking(launch: Launch, platform: FakePlatform) -> None:
    platform.message_type = "LtiDeepLinkingRequest"
    assert launch().status_code == 403


def test_a_link_without_an_exercise_is_chosen_by_the_instructor(
    launch: Launch, platform: FakePlatform, browser_client: httpx.Client
) -> None:
    platform.custom = {}
    platform.roles = [INSTRUCTOR]
    platform.subject = "teacher-1"
    chooser = enter(browser_client, launch())
    assert chooser.url.path.startswith("/lti/links/")
    chosen = browser_client.post(
        str(chooser.url),
        data={"csrf_token": csrf_of(chooser.text), "exercise": "prove-accumulation"},
        follow_redirects=True,
    )
    assert chosen.status_code == 200 and chosen.url.path.endswith("/exercises/prove-accumulation")


def test_a_retired_key_stays_published_until_its_tokens_expired(
    tool_url: str, sessions: SessionFactory, settings: Settings
) -> None:
    first = httpx.get(f"{tool_url}/lti/jwks", timeout=HTTP_TIMEOUT_SECONDS).json()["keys"]
    assert len(first) == 1 and first[0]["alg"] == "RS256" and "d" not in first[0]
    assert (
        httpx.get(f"{tool_url}/.well-known/jwks.json", timeout=HTTP_TIMEOUT_SECONDS).json()["keys"]
        == first
    )
    with sessions.begin() as session:
        new_kid = rotate_tool_key(session, key_sealing(settings)).kid
    kids = [
        key["kid"]
        for key in httpx.get(f"{tool_url}/lti/jwks", timeout=HTTP_TIMEOUT_SECONDS).json()["keys"]
    ]
    assert kids == [new_kid, first[0]["kid"]]
    with sessions.begin() as session:
        old = session.get(LtiToolKey, first[0]["kid"])
        assert old is not None
        old.retired_at = utc_now() - KEY_RETENTION - timedelta(minutes=1)
    kids = [
        key["kid"]
        for key in httpx.get(f"{tool_url}/lti/jwks", timeout=HTTP_TIMEOUT_SECONDS).json()["keys"]
    ]
    assert kids == [new_kid]


def test_the_configuration_names_the_tool_urls(tool_url: str) -> None:
    config = httpx.get(f"{tool_url}/lti/config", timeout=HTTP_TIMEOUT_SECONDS).json()
    assert config["oidc_initiation_url"] == f"{tool_url}/lti/login"
    assert config["target_link_uri"] == f"{tool_url}/lti/launch"
    assert config["public_jwk_url"] == f"{tool_url}/lti/jwks"
    assert "https://purl.imsglobal.org/spec/lti-ags/scope/score" in config["scopes"]


def test_the_admin_page_shows_everything_to_paste(
    tool_url: str, platform: FakePlatform, sessions: SessionFactory
) -> None:
    with sessions.begin() as session:
        create_user(
            session,
            email="ops@site.example",
            name="Ops",
            password="a long password",
            site_role=SiteRole.ADMIN,
        )
    with httpx.Client(base_url=tool_url, timeout=HTTP_TIMEOUT_SECONDS) as client:
        page = client.get("/sign-in")
        signed_in = client.post(
            "/sign-in",
            data={
                "email": "ops@site.example",
                "password": "a long password",
                "csrf_token": csrf_of(page.text),
            },
        )
        assert signed_in.status_code == 303, signed_in.text
        admin = client.get("/lti/admin")
    assert admin.status_code == 200
    for url in ("/lti/login", "/lti/launch", "/lti/jwks", "/lti/config"):
        assert f"{tool_url}{url}" in admin.text
    assert platform.client_id in admin.text and platform.deployment_id in admin.text


def test_the_admin_page_is_for_admins(tool_url: str) -> None:
    answer = httpx.get(f"{tool_url}/lti/admin", timeout=HTTP_TIMEOUT_SECONDS)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/sign-in")


def test_the_cli_registers_lists_and_rotates(settings: Settings, sessions: SessionFactory) -> None:
    fake = FakePlatform(url="https://lms.example.edu")
    added = loopgrade(
        "lti", "platforms", "add", *fake.cli_args(), "--deployment-id", "2",
        data_dir=settings.data_dir,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    with sessions() as session:
        platform = session.scalars(select(LtiPlatform)).one()
        assert platform.token_url == "https://lms.example.edu/token"
    listed = loopgrade("lti", "platforms", "list", data_dir=settings.data_dir)
    assert "https://lms.example.edu" in listed.stdout and "2, deployment-1" in listed.stdout
    refused = loopgrade(
        "lti", "platforms", "add", *fake.cli_args(), "--jwks-url", "http://lms.example.edu/k",
        data_dir=settings.data_dir,
    )  # fmt: skip
    assert refused.returncode == 1 and "--jwks-url must use https://" in refused.stderr
    rotated = loopgrade("lti", "keys", "rotate", data_dir=settings.data_dir)
    assert rotated.returncode == 0 and "New signing key" in rotated.stdout
