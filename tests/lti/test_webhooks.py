"""Course webhooks: signed with a timestamp, delivered to a real receiver, refused or retried."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response

from app.db import SessionFactory
from app.lti.ags import PlatformRefused, PlatformUnavailable
from app.lti.webhooks import (
    SIGNATURE_HEADER,
    WebhookError,
    check_webhook_url,
    create_webhook,
    deliver_webhook,
    graded_messages,
    revoke_webhook,
    sample_event_message,
)
from app.models import Course, Submission, SubmissionStatus, utc_now
from tests.servers import app_in_thread

REPLAY_WINDOW_SECONDS = 300


@dataclass
class Receiver:
    """A subscriber that checks signatures as docs/api.md tells receivers to."""

    secret: str = ""
    fail_next: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/hook")
        async def hook(request: Request) -> Response:
            if self.fail_next:
                self.fail_next -= 1
                return Response(status_code=502)
            body = await request.body()
            fields = dict(p.split("=", 1) for p in request.headers[SIGNATURE_HEADER].split(","))
            timestamp = int(fields["t"])
            expected = hmac.new(
                self.secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256
            ).hexdigest()
            if not hmac.compare_digest(expected, fields["v1"]):
                return Response(status_code=401)
            if abs(time.time() - timestamp) > REPLAY_WINDOW_SECONDS:
                return Response(status_code=401)
            self.events.append(await request.json())
            return Response(status_code=204)

        return app


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    with app_in_thread(found.app()) as url:
        found.url = f"{url}/hook"
        yield found


@pytest.fixture
def course_id(sessions: SessionFactory) -> str:
    with sessions.begin() as session:
        course = Course(name="C", join_code="ABCDEFGH")
        session.add(course)
        session.flush()
        return course.id


def test_a_graded_submission_is_delivered_signed(
    receiver: Receiver, sessions: SessionFactory, course_id: str
) -> None:
    with sessions.begin() as session:
        webhook = create_webhook(
            session, course_id=course_id, url=receiver.url, allow_private_addresses=True
        )
        receiver.secret = webhook.secret
        submission = Submission(
            exercise_id="train-step",
            exercise_version="v",
            learner="alice",
            code="pass",
            status=SubmissionStatus.GRADED,
            score=10.0,
            max_score=10.0,
            diagnosis="correct",
            course_id=course_id,
            graded_at=utc_now(),
        )
        session.add(submission)
        session.flush()
        (message,) = graded_messages(session, submission)
    with sessions() as session:
        deliver_webhook(session, message)
    (event,) = receiver.events
    assert event["type"] == "submission.graded"
    assert event["data"]["score"] == 10.0 and event["data"]["diagnosis"] == "correct"


def test_a_wrong_secret_is_refused_by_the_receiver(
    receiver: Receiver, sessions: SessionFactory, course_id: str
) -> None:
    with sessions.begin() as session:
        webhook = create_webhook(
            session, course_id=course_id, url=receiver.url, allow_private_addresses=True
        )
        message = sample_event_message(webhook)
    receiver.secret = "not-the-secret"
    with sessions() as session, pytest.raises(PlatformRefused, match="HTTP 401"):
        deliver_webhook(session, message)
    assert receiver.events == []


def test_a_failing_receiver_is_retried_and_a_removed_webhook_given_up(
    receiver: Receiver, sessions: SessionFactory, course_id: str
) -> None:
    with sessions.begin() as session:
        webhook = create_webhook(
            session, course_id=course_id, url=receiver.url, allow_private_addresses=True
        )
        receiver.secret = webhook.secret
        message = sample_event_message(webhook)
    receiver.fail_next = 1
    with sessions() as session:
        with pytest.raises(PlatformUnavailable, match="HTTP 502"):
            deliver_webhook(session, message)
        deliver_webhook(session, message)
    assert [e["type"] for e in receiver.events] == ["test"]
    with sessions.begin() as session:
        found = session.get(type(webhook), webhook.id)
        assert found is not None
        revoke_webhook(session, found)
    with sessions() as session, pytest.raises(PlatformRefused, match="removed"):
        deliver_webhook(session, message)


@pytest.mark.parametrize(
    "url",
    ["http://hooks.example.com/x", "https://127.0.0.1/x", "https://10.1.2.3/x", "ftp://a/b", "x"],
)
def test_webhook_urls_must_be_https_to_other_servers(url: str) -> None:
    with pytest.raises(WebhookError):
        check_webhook_url(url, allow_private_addresses=False)


def test_a_public_https_url_is_accepted() -> None:
    assert check_webhook_url(" https://hooks.example.com/x ", allow_private_addresses=False) == (
        "https://hooks.example.com/x"
    )
