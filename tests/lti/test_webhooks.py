"""Course webhooks: signed with a timestamp, delivered to a real receiver, refused or retried."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.db import SessionFactory
from app.integrations import webhooks
from app.integrations.delivery_errors import PlatformRefused, PlatformUnavailable
from app.integrations.webhooks import (
    IPAddress,
    WebhookError,
    check_webhook_url,
    create_webhook,
    deliver_webhook,
    graded_messages,
    pinned_request,
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
        deliver_webhook(session, message, allow_private_addresses=True)
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
        deliver_webhook(session, message, allow_private_addresses=True)
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
            deliver_webhook(session, message, allow_private_addresses=True)
        deliver_webhook(session, message, allow_private_addresses=True)
    assert [e["type"] for e in receiver.events] == ["test"]
    with sessions.begin() as session:
        found = session.get(type(webhook), webhook.id)
        assert found is not None
        revoke_webhook(session, found)
    with sessions() as session, pytest.raises(PlatformRefused, match="removed"):
        deliver_webhook(session, message, allow_private_addresses=True)


PUBLIC_ADDRESS = ipaddress.ip_address("93.184.215.14")
INTERNAL_ADDRESSES = [
    "127.0.0.1",
    "::1",
    "::ffff:127.0.0.1",
    "0.0.0.0",
    "::",
    "10.1.2.3",
    "192.168.0.1",
    "169.254.169.254",
    "fe80::1",
    "100.64.0.1",
    "fc00::1",
    "fd12:3456::1",
    "2002:7f00:1::",
    "64:ff9b::7f00:1",
    "224.0.0.1",
    "240.0.0.1",
]


def resolving_to(*answers: list[str]) -> Callable[[str], list[IPAddress]]:
    """A resolver (DNS is outside this machine) giving each answer in turn, then the last;
    an IP literal resolves to itself, as with the system's resolver."""
    remaining = list(answers)

    def resolve(host: str) -> list[IPAddress]:
        with contextlib.suppress(ValueError):
            return [ipaddress.ip_address(host)]
        answer = remaining.pop(0) if len(remaining) > 1 else remaining[0]
        return [ipaddress.ip_address(a) for a in answer]

    return resolve


@pytest.mark.parametrize(
    "url",
    ["http://hooks.example.com/x", "https://127.0.0.1/x", "https://10.1.2.3/x", "ftp://a/b", "x"],
)
def test_webhook_urls_must_be_https_to_other_servers(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhooks, "resolve_host", resolving_to([str(PUBLIC_ADDRESS)]))
    with pytest.raises(WebhookError):
        check_webhook_url(url, allow_private_addresses=False)


@pytest.mark.parametrize("address", INTERNAL_ADDRESSES)
def test_internal_addresses_are_refused_as_literals_and_behind_names(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = f"[{address}]" if ":" in address else address
    with pytest.raises(WebhookError, match="private or loopback"):
        check_webhook_url(f"https://{host}/x", allow_private_addresses=False)
    # A name answering a public address and an internal one is refused too.
    monkeypatch.setattr(webhooks, "resolve_host", resolving_to([str(PUBLIC_ADDRESS), address]))
    with pytest.raises(
        WebhookError,
        match=re.escape(f"hooks.example.com resolves to {ipaddress.ip_address(address)}"),
    ):
        check_webhook_url("https://hooks.example.com/x", allow_private_addresses=False)


def test_localhost_is_refused_by_what_it_resolves_to() -> None:
    with pytest.raises(WebhookError, match=r"localhost resolves to .*(127\.0\.0\.1|::1)"):
        check_webhook_url("https://localhost/x", allow_private_addresses=False)


def test_a_name_that_does_not_resolve_is_refused_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unresolvable(host: str) -> list[IPAddress]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(webhooks, "resolve_host", unresolvable)
    with pytest.raises(WebhookError, match=r"hooks\.example\.invalid cannot be resolved"):
        check_webhook_url("https://hooks.example.invalid/x", allow_private_addresses=False)


def test_a_public_https_url_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhooks, "resolve_host", resolving_to([str(PUBLIC_ADDRESS)]))
    assert check_webhook_url(" https://hooks.example.com/x ", allow_private_addresses=False) == (
        "https://hooks.example.com/x"
    )


def test_the_connection_goes_to_the_checked_address_under_the_hook_s_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(webhooks, "resolve_host", resolving_to([str(PUBLIC_ADDRESS)]))
    target, options = pinned_request(
        "https://hooks.example.com:8443/x?a=1", allow_private_addresses=False
    )
    assert target == f"https://{PUBLIC_ADDRESS}:8443/x?a=1"
    assert options["headers"] == {"Host": "hooks.example.com:8443"}
    assert options["extensions"] == {"sni_hostname": "hooks.example.com"}


def added_webhook_event(
    sessions: SessionFactory, receiver: Receiver, course_id: str, url: str, *, allow_private: bool
) -> dict[str, Any]:
    """A webhook to `url` added (the receiver given its secret) and a test event for it."""
    with sessions.begin() as session:
        webhook = create_webhook(
            session, course_id=course_id, url=url, allow_private_addresses=allow_private
        )
        receiver.secret = webhook.secret
        return sample_event_message(webhook)


def test_a_delivery_is_sent_to_the_resolved_address_with_the_name_as_host(
    receiver: Receiver,
    sessions: SessionFactory,
    course_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = httpx.URL(receiver.url).port
    monkeypatch.setattr(webhooks, "resolve_host", resolving_to(["127.0.0.1"]))
    message = added_webhook_event(
        sessions, receiver, course_id, f"http://hooks.test:{port}/hook", allow_private=True
    )
    with sessions() as session:
        deliver_webhook(session, message, allow_private_addresses=True)
    assert receiver.hosts == [f"hooks.test:{port}"]
    assert [event["type"] for event in receiver.events] == ["test"]


def test_a_name_rebound_to_loopback_after_registration_is_not_reached(
    receiver: Receiver,
    sessions: SessionFactory,
    course_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding: public when the webhook is added, 127.0.0.1 when it is delivered."""
    port = httpx.URL(receiver.url).port
    monkeypatch.setattr(
        webhooks, "resolve_host", resolving_to([str(PUBLIC_ADDRESS)], ["127.0.0.1"])
    )
    message = added_webhook_event(
        sessions,
        receiver,
        course_id,
        f"https://rebind.example.com:{port}/hook",
        allow_private=False,
    )
    with (
        sessions() as session,
        pytest.raises(PlatformRefused, match=r"rebind\.example\.com resolves to 127\.0\.0\.1"),
    ):
        deliver_webhook(session, message, allow_private_addresses=False)
    assert receiver.hosts == []
