"""Grade passback and roster sync against the fake platform's AGS and NRPS endpoints."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI, Request, Response
from sqlalchemy import select

from app.db import SessionFactory
from app.integrations.ags import DeliveryOutcome, deliver_score, score_message, sync_roster
from app.integrations.ags_client import SCORE_SCOPE, AccessTokens, service_request, service_url
from app.integrations.delivery_errors import PlatformRefused, PlatformUnavailable
from app.integrations.keys import key_sealing
from app.integrations.models import LtiContext, LtiPlatform, LtiUser
from app.models import CourseRole, Enrolment, Submission, User
from app.settings import Settings
from tests.app.people import graded
from tests.lti.conftest import Launch
from tests.lti.fake_platform import INSTRUCTOR, LEARNER, FakePlatform
from tests.servers import app_in_thread


def graded_submission(sessions: SessionFactory, score: float) -> str:
    """A graded submission of the launched learner's, in the launched course."""
    with sessions() as session:
        user_id = session.scalars(select(LtiUser.user_id)).one()
        course_id = session.scalars(select(LtiContext.course_id)).one()
    return graded(sessions, user_id=user_id, course_id=course_id, score=score)


def message_for(sessions: SessionFactory, submission_id: str) -> dict[str, object]:
    with sessions() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        message = score_message(session, submission)
    assert message is not None
    return message


def test_scores_go_before_the_query_string() -> None:
    assert service_url("https://lms.example/items/1?course=7", "scores") == (
        "https://lms.example/items/1/scores?course=7"
    )
    assert service_url("https://lms.example/items/1/", "results") == (
        "https://lms.example/items/1/results"
    )


def test_a_score_reaches_the_line_item_with_a_cached_token(
    launch: Launch, platform: FakePlatform, sessions: SessionFactory, settings: Settings
) -> None:
    assert launch().status_code == 303
    tokens = AccessTokens()
    message = message_for(sessions, graded_submission(sessions, 7.0))
    assert message["user_sub"] == "learner-1"
    with sessions() as session:
        assert (
            deliver_score(session, key_sealing(settings), tokens, message)
            is DeliveryOutcome.DELIVERED
        )
    (stored,) = platform.scores["1"].values()
    assert (stored.user_id, stored.score_given, stored.score_maximum) == ("learner-1", 7.0, 10.0)
    assert (stored.grading_progress, stored.activity_progress) == ("FullyGraded", "Completed")

    # Best score counts (the course's default policy): a worse one sends the best again.
    later = message_for(sessions, graded_submission(sessions, 3.0))
    assert later["score_given"] == 7.0
    with sessions() as session:
        assert (
            deliver_score(session, key_sealing(settings), tokens, later)
            is DeliveryOutcome.DELIVERED
        )
    # The token was cached (the roster sync of the first launch asks for its own scope).
    assert platform.token_scopes.count(SCORE_SCOPE) == 1


def test_a_retry_keeps_the_timestamp_and_a_409_counts_as_applied(
    launch: Launch, platform: FakePlatform, sessions: SessionFactory, settings: Settings
) -> None:
    assert launch().status_code == 303
    tokens = AccessTokens()
    message = message_for(sessions, graded_submission(sessions, 10.0))
    with sessions() as session:
        assert (
            deliver_score(session, key_sealing(settings), tokens, message)
            is DeliveryOutcome.DELIVERED
        )
        # The answer was lost and the outbox sends it again, with the same timestamp.
        assert (
            deliver_score(session, key_sealing(settings), tokens, message)
            is DeliveryOutcome.ALREADY_APPLIED
        )
    assert platform.score_posts == 2 and len(platform.scores["1"]) == 1


def test_a_user_the_platform_cannot_grade_is_refused_for_good(
    launch: Launch, platform: FakePlatform, sessions: SessionFactory, settings: Settings
) -> None:
    assert launch().status_code == 303
    platform.ungradable_users.add("learner-1")
    message = message_for(sessions, graded_submission(sessions, 10.0))
    with sessions() as session, pytest.raises(PlatformRefused, match="HTTP 400"):
        deliver_score(session, key_sealing(settings), AccessTokens(), message)


def test_a_platform_that_fails_is_retried_later(
    launch: Launch, platform: FakePlatform, sessions: SessionFactory, settings: Settings
) -> None:
    assert launch().status_code == 303
    platform.fail_score_posts = 2
    tokens = AccessTokens()
    message = message_for(sessions, graded_submission(sessions, 10.0))
    with sessions() as session:
        for _ in range(2):
            with pytest.raises(PlatformUnavailable, match="HTTP 503"):
                deliver_score(session, key_sealing(settings), tokens, message)
        assert (
            deliver_score(session, key_sealing(settings), tokens, message)
            is DeliveryOutcome.DELIVERED
        )
    assert "learner-1" in platform.scores["1"]


def test_a_submission_outside_lti_sends_nothing(sessions: SessionFactory) -> None:
    with sessions() as session:
        assert score_message(session, Submission(exercise_id="train-step")) is None


def test_the_roster_is_enrolled_on_first_launch_and_on_demand(
    launch: Launch, platform: FakePlatform, sessions: SessionFactory, settings: Settings
) -> None:
    platform.members = [
        {"user_id": "learner-1", "roles": [LEARNER], "status": "Active", "name": "Person 1"},
        {"user_id": "teacher-9", "roles": [INSTRUCTOR], "name": "Tess Teacher"},
        {"user_id": "learner-5", "roles": [LEARNER], "email": "l5@lms.example"},
        {"user_id": "gone-3", "roles": [LEARNER], "status": "Inactive"},
    ]
    assert launch().status_code == 303
    # The first launch into the LMS course asked the outbox for its roster.
    deadline = time.monotonic() + 60
    while True:
        with sessions() as session:
            if session.scalars(select(LtiContext.roster_synced_at)).one() is not None:
                break
        assert time.monotonic() < deadline, "the first launch's roster sync did not happen"
        time.sleep(0.2)
    with sessions() as session:
        roles = dict(
            session.execute(
                select(User.name, Enrolment.role).join(Enrolment, Enrolment.user_id == User.id)
            ).all()
        )
        assert roles["Tess Teacher"] == CourseRole.INSTRUCTOR
        assert len(roles) == 3  # the inactive member is left out
    platform.members.append({"user_id": "late-7", "roles": [LEARNER], "name": "Late Joiner"})
    with sessions.begin() as session:
        context = session.scalars(select(LtiContext)).one()
        synced = sync_roster(session, key_sealing(settings), AccessTokens(), context)
    assert (synced.added, synced.updated) == (1, 3)


@pytest.fixture
def token_catcher() -> Iterator[tuple[str, list[str]]]:
    """A server on loopback, not the platform's: every Authorization header it is sent."""
    caught: list[str] = []
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def anything(request: Request) -> Response:
        caught.append(request.headers.get("authorization", ""))
        return Response(status_code=200, content="[]")

    with app_in_thread(app) as url:
        yield url, caught


def test_the_token_goes_to_no_internal_address_a_platform_names(
    launch: Launch,
    platform: FakePlatform,
    sessions: SessionFactory,
    settings: Settings,
    token_catcher: tuple[str, list[str]],
) -> None:
    """A hostile platform's launch names services on this server's network: refused before
    any token is asked for or sent; its registered origin (loopback here) still works."""
    assert launch().status_code == 303
    catcher_url, caught = token_catcher
    port = catcher_url.rsplit(":", 1)[1]
    message = message_for(sessions, graded_submission(sessions, 10.0))
    hostile = {
        f"{catcher_url}/items/1": "must use https",  # plain http to another origin
        f"https://localhost:{port}/items/1": "127.0.0.1",  # https, resolving to loopback
        f"https://127.0.0.1:{port}/items/1": "127.0.0.1",
        f"https://[::1]:{port}/items/1": "::1",
        "https://169.254.169.254/latest/meta-data": "169.254.169.254",  # cloud metadata
        f"https://10.0.0.1:{port}/items/1": "10.0.0.1",
        f"https://[::ffff:127.0.0.1]:{port}/items/1": "127.0.0.1",
    }
    tokens_asked = len(platform.token_scopes)
    with sessions() as session:
        for url, named in hostile.items():
            with pytest.raises(PlatformRefused, match=re.escape(named)):
                deliver_score(
                    session, key_sealing(settings), AccessTokens(), {**message, "lineitem_url": url}
                )
    with sessions.begin() as session:
        context = session.scalars(select(LtiContext)).one()
        for url, named in hostile.items():
            context.memberships_url = url
            with pytest.raises(PlatformRefused, match=re.escape(named)):
                sync_roster(session, key_sealing(settings), AccessTokens(), context)
    assert caught == []
    assert len(platform.token_scopes) == tokens_asked  # no token was even asked for
    with sessions() as session:
        assert (
            deliver_score(session, key_sealing(settings), AccessTokens(), message)
            is DeliveryOutcome.DELIVERED
        )


def test_a_registered_origin_is_the_platforms_own_whatever_its_case() -> None:
    platform = LtiPlatform(
        issuer="https://lms.example",
        client_id="c",
        auth_url="http://127.0.0.1:8001/auth",
        token_url="https://auth.lms.example/token",
        jwks_url="https://auth.lms.example/jwks",
    )
    assert service_request(platform, "http://127.0.0.1:8001/items/1") == (
        "http://127.0.0.1:8001/items/1",
        {},
    )
    assert service_request(platform, "HTTPS://LMS.example/items/1")[0] == (
        "HTTPS://LMS.example/items/1"
    )
    # Another port of the same loopback host is another origin.
    with pytest.raises(PlatformRefused, match="https"):
        service_request(platform, "http://127.0.0.1:8002/items/1")
