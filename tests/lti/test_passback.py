"""The whole flow on a real server process: launch, submit in the page, graded in the
sandbox, the score posted to the LMS and the course's webhook called through the outbox;
the server killed in the middle of the score's POST, restarted, the platform failing twice
more before it accepts: the score arrives once, with the original timestamp."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import select

from app.db import SessionFactory
from app.models import OutboxMessage, OutboxStatus, Submission
from tests.app.conftest import CORRECT_CODE
from tests.lti.conftest import give_course_webhook, launch_to_exercise
from tests.lti.fake_platform import FakePlatform
from tests.lti.receiver import Receiver
from tests.servers import app_in_thread, running_server

WAIT_SECONDS = 180.0


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_score_survives_a_crash_mid_post_and_a_platform_failing_twice(
    tmp_path: Path, sessions: SessionFactory, browser_client: httpx.Client
) -> None:
    data_dir = tmp_path / "data"  # the `settings` fixture's, which `sessions` opened
    log_path = tmp_path / "server.log"
    env = {
        **os.environ,
        "LOOPGRADE_SUBMISSION_RATE_LIMIT": "0",
        "LOOPGRADE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true",
        "LOOPGRADE_OUTBOX_RETRY_BASE_SECONDS": "0.2",
        "LOOPGRADE_OUTBOX_RETRY_MAX_SECONDS": "0.5",
        "LOOPGRADE_OUTBOX_CLAIM_TIMEOUT_SECONDS": "3",
        # The restarted server delivers before it answers, so before the platform knows its new
        # address (its token endpoint checks our JWKS there): those tries fail, as many as a
        # loaded machine's start-up lasts, and must not use up the message's tries.
        "LOOPGRADE_OUTBOX_MAX_ATTEMPTS": "1000",
        # One grading in two servers: a cold sandbox for it, not a warm pool in each (two
        # sandboxes importing torch per start, the second server's for nothing).
        "LOOPGRADE_SANDBOX_POOL_SIZE": "0",
    }
    platform = FakePlatform()
    receiver = Receiver()
    with app_in_thread(platform.app()) as platform_url, app_in_thread(receiver.app()) as hooks:
        platform.url = platform_url
        receiver.url = f"{hooks}/hook"
        from app.lti.platforms import add_platform

        with sessions.begin() as session:
            add_platform(session, **platform.registration())

        with running_server(data_dir, log_path, env=env) as (server, url):
            platform.tool_url = url
            exercise = launch_to_exercise(browser_client, platform)
            give_course_webhook(sessions, receiver)

            platform.stall_next_score_post = True
            platform.fail_score_posts = 2
            token = re.search(r'name="csrf_token" value="([^"]+)"', exercise.text)
            assert token
            submitted = browser_client.post(
                str(exercise.url), data={"csrf_token": token[1], "code": CORRECT_CODE}
            )
            assert submitted.status_code == 303, submitted.text
            # Graded in the sandbox; the score's POST is now held by the platform.
            wait_for(lambda: platform.score_posts == 1, "the score's first POST")
            server.send_signal(signal.SIGKILL)
            server.wait()
        platform.release_stalled.set()

        with sessions() as session:
            submission = session.scalars(select(Submission)).one()
            assert submission.status == "graded" and submission.score is not None
            score = session.scalars(
                select(OutboxMessage).where(OutboxMessage.kind == "lti-score")
            ).one()
            assert score.status == OutboxStatus.PENDING and score.attempts == 1
            original_timestamp = score.payload["timestamp"]

        with running_server(data_dir, log_path, env=env) as (_, url):
            platform.tool_url = url  # its token endpoint checks our JWKS at the new address
            wait_for(lambda: "1" in platform.scores, "the score to be recorded")
            wait_for(lambda: receiver.events, "the webhook")
            with sessions() as session:
                wait_for(
                    lambda: (
                        session.scalars(
                            select(OutboxMessage.status).where(OutboxMessage.kind == "lti-score")
                        ).one()
                        == OutboxStatus.DELIVERED
                    ),
                    "the outbox to record the delivery",
                )

    # The stalled POST, two 503s, then the one recorded.
    assert platform.score_posts == 4
    (stored,) = platform.scores["1"].values()
    assert (stored.score_given, stored.score_maximum) == (submission.score, submission.max_score)
    assert stored.timestamp.isoformat() == original_timestamp
    (event,) = receiver.events
    assert event["type"] == "submission.graded"
    assert event["data"]["diagnosis"] == submission.diagnosis
