"""Course webhooks: signed with a timestamp, delivered to a real receiver, refused or retried."""

from __future__ import annotations

import pytest

from app.db import SessionFactory
from app.lti.ags import PlatformRefused, PlatformUnavailable
from app.lti.webhooks import (
    WebhookError,
    check_webhook_url,
    create_webhook,
    deliver_webhook,
    graded_messages,
    revoke_webhook,
    sample_event_message,
)
from app.models import Course, Submission, SubmissionStatus, utc_now
from tests.lti.receiver import Receiver


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
