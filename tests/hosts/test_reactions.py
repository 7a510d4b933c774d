"""What a stored grade triggers, wherever it is stored: an LTI learner's submission graded by
a `loopgrade worker` process reaches the fake platform (AGS) and the course's webhook; a
`loopgrade regrade` process and a `loopgrade serve` process grading in its own threads store
grades of the same submission, and every path writes the same outbox messages; an
instructor's override sends the LMS its score.

All on one PostgreSQL; the API host runs in this process, sends submissions to Redis and
grades nothing; the fake platform and the webhook receiver listen on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from app.courses.overrides import set_override
from app.db import SessionFactory
from app.integrations.platforms import add_platform
from app.models import (
    OutboxMessage,
    OutboxStatus,
    Regrade,
    SiteRole,
    Submission,
    SubmissionStatus,
    utc_now,
)
from app.people.accounts import create_user, find_user_by_email
from graders.exercises import get_exercise
from graders.grading import hidden_budget
from tests.app.conftest import CORRECT_CODE, EXERCISE, csrf_token
from tests.graders.test_hidden_time import released_at_a_delay
from tests.hosts.conftest import Worker
from tests.lti.conftest import (  # noqa: F401 (browser_client and receiver: fixtures)
    browser_client,
    give_course_webhook,
    launch_to_exercise,
    receiver,
)
from tests.lti.fake_platform import FakePlatform
from tests.lti.receiver import Receiver
from tests.servers import REPO, app_in_thread, running_server

WAIT_SECONDS = 180.0
INSTRUCTOR = "tess@example.org"
# What differs between two messages for one grade by design: when each was decided.
WHEN_FIELDS = ("timestamp", "created_at", "graded_at", "id")
ALL_REACTIONS = {
    "on_graded": ["send_score_to_lms", "send_to_webhooks"],
    "on_overridden": ["send_score_to_lms"],
    "outbox_kinds": ["lti-roster", "lti-score", "webhook"],
}


@pytest.fixture
def host_env(host_env: dict[str, str]) -> dict[str, str]:
    return {
        **host_env,
        "LOOPGRADE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true",
        "LOOPGRADE_OUTBOX_RETRY_BASE_SECONDS": "0.5",
        "LOOPGRADE_OUTBOX_RETRY_MAX_SECONDS": "1",
    }


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def platform(api: httpx.Client, sessions: SessionFactory) -> Iterator[FakePlatform]:
    fake = FakePlatform(tool_url=str(api.base_url).rstrip("/"))
    with app_in_thread(fake.app()) as url:
        fake.url = url
        with sessions.begin() as session:
            add_platform(session, **fake.registration())
        yield fake


def launch_and_submit(
    client: httpx.Client, platform: FakePlatform, sessions: SessionFactory, hooks: Receiver
) -> str:
    """Launch from the platform, give the course a webhook, submit the correct loop; its id."""
    exercise = launch_to_exercise(client, platform)
    give_course_webhook(sessions, hooks)
    with sessions.begin() as session:
        create_user(
            session, email=INSTRUCTOR, name="Tess", password="x" * 12, site_role=SiteRole.INSTRUCTOR
        )
    page_url = str(exercise.url)
    submitted = client.post(
        page_url, data={"csrf_token": csrf_token(client, page_url), "code": CORRECT_CODE}
    )
    assert submitted.status_code == 303, submitted.text
    with sessions() as session:
        return session.scalars(select(Submission.id)).one()


def messages_after(sessions: SessionFactory, after_id: int) -> list[OutboxMessage]:
    """The messages grades wrote after `after_id` (not the roster sync a first launch asks)."""
    with sessions() as session:
        return list(
            session.scalars(
                select(OutboxMessage)
                .where(OutboxMessage.id > after_id, OutboxMessage.kind != "lti-roster")
                .order_by(OutboxMessage.id)
            )
        )


def last_message_id(sessions: SessionFactory) -> int:
    with sessions() as session:
        return max(session.scalars(select(OutboxMessage.id)).all(), default=0)


def delivered(sessions: SessionFactory, after_id: int, count: int) -> bool:
    found = messages_after(sessions, after_id)
    return len(found) == count and all(m.status == OutboxStatus.DELIVERED for m in found)


def without_when(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_when(v) for k, v in value.items() if k not in WHEN_FIELDS}
    return value


def as_compared(found: list[OutboxMessage]) -> list[tuple[str, Any]]:
    return sorted((m.kind, without_when(m.payload)) for m in found)


def forget_grade(sessions: SessionFactory, submission_id: str, **values: object) -> None:
    """Make the stored grade one an older grader made (0 points), so that grading it again
    changes the score."""
    with sessions.begin() as session:
        session.execute(
            update(Submission)
            .where(Submission.id == submission_id)
            .values(score=0.0, diagnosis="incorrect", exercise_version="0-older", **values)
        )


def released(log: str, submission_id: str) -> tuple[datetime, float]:
    """When the worker says the submission's hidden part began, and its release delay."""
    found = re.search(
        rf"submission {submission_id}: released (\S+) s after its hidden cases began at (\S+)",
        log,
    )
    assert found is not None, log
    return datetime.fromisoformat(found[2]), float(found[1])


def assert_all_reactions(reactions: dict[str, list[str]]) -> None:
    """What /readyz lists: every reaction of app/reactions.py. An in-process API host also
    lists the outbox kinds other tests of this process registered (named `tests.`)."""
    ours = {
        **reactions,
        "outbox_kinds": [k for k in reactions["outbox_kinds"] if not k.startswith("tests.")],
    }
    assert ours == ALL_REACTIONS


def test_every_path_that_stores_a_grade_reaches_the_lms_and_the_webhooks(
    host_env: dict[str, str],
    api: httpx.Client,
    platform: FakePlatform,
    receiver: Receiver,  # noqa: F811
    sessions: SessionFactory,
    start_worker: Callable[..., Worker],
    browser_client: httpx.Client,  # noqa: F811
    tmp_path: Path,
) -> None:
    # 1. A Celery worker, in another process, grades the launch's submission.
    worker = start_worker()
    submission_id = launch_and_submit(browser_client, platform, sessions, receiver)
    wait_for(lambda: delivered(sessions, 0, 2), "the worker's grade's score and webhook")
    by_worker = messages_after(sessions, 0)
    assert sorted(m.kind for m in by_worker) == ["lti-score", "webhook"]
    ((recorded,),) = [list(scores.values()) for scores in platform.scores.values()]
    assert (recorded.score_given, recorded.score_maximum) == (10, 10)
    (event,) = receiver.events
    assert event["data"]["submission_id"] == submission_id and event["data"]["score"] == 10
    assert "a stored grade triggers" in worker.log()
    # Computed at the worker's start, before it took its first task: no grading waited for them.
    log = worker.log()
    assert "trusted trajectories are computed" in log and "received" in log, log
    assert log.index("trusted trajectories are computed") < log.index("received")
    assert "send_score_to_lms" in worker.log() and "'webhook'" in worker.log()
    assert_all_reactions(api.get("/readyz").json()["reactions"])
    # Stored, and so sent to the LMS and the webhook, only at its release: one of the coarse
    # delays after the hidden part began (graders.grading.HiddenBudget), or on a loaded
    # machine a whole multiple of one, never sooner.
    began, delay = released(worker.log(), submission_id)
    assert released_at_a_delay(delay, hidden_budget(get_exercise(EXERCISE)))
    with sessions() as session:
        graded_at = session.scalars(
            select(Submission.graded_at).where(Submission.id == submission_id)
        ).one()
    assert graded_at is not None and graded_at >= began + timedelta(seconds=delay)
    assert event["data"]["graded_at"] == graded_at.isoformat()
    assert recorded.timestamp >= began + timedelta(seconds=delay)
    worker.stop()

    # 2. `loopgrade regrade` grades it again in its own process (no broker), and the changed
    # score (0 before, as an older grader stored it) goes to the LMS and the webhook: sent by
    # the API host (within its outbox's poll), with its delivery settings, not by the command.
    forget_grade(sessions, submission_id)
    before = last_message_id(sessions)
    cli_env = {k: v for k, v in {**os.environ, **host_env}.items() if k != "LOOPGRADE_BROKER_URL"}
    # An operator's shell, without the hosts' LOOPGRADE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES (the
    # receiver is on loopback): the webhook is still delivered, by a host that allows it.
    shell_env = {k: v for k, v in cli_env.items() if "ALLOW_PRIVATE" not in k}
    regrade = subprocess.run(
        [sys.executable, "-m", "app.cli", "regrade", "--course", event["course_id"],
         "--exercise", "train-step", "--by", INSTRUCTOR, "--reason", "grader-updated"],
        cwd=REPO, env=shell_env, capture_output=True, text=True, timeout=WAIT_SECONDS,
    )  # fmt: skip
    assert regrade.returncode == 0, regrade.stderr
    assert "Graded 1 submissions again" in regrade.stdout, regrade.stdout
    assert len(messages_after(sessions, before)) == 2
    wait_for(lambda: delivered(sessions, before, 2), "the regrade's messages, by the API host")
    by_cli = messages_after(sessions, before)
    with sessions() as session:
        (changed,) = session.scalars(select(Regrade)).all()
        assert (changed.old_score, changed.new_score) == (0, 10)
    assert platform.score_posts == 2
    ((newest,),) = [list(scores.values()) for scores in platform.scores.values()]
    assert newest.score_given == 10 and newest.timestamp > recorded.timestamp
    assert len(receiver.events) == 2

    # 3. `loopgrade serve` without a broker grades in its own threads: the submission is
    # left queued (as a restart finds it) and its start-up sweep grades it.
    forget_grade(
        sessions,
        submission_id,
        status=SubmissionStatus.QUEUED,
        queued_at=utc_now() - timedelta(hours=1),
    )
    before = last_message_id(sessions)
    serve_env = {**cli_env, "LOOPGRADE_SANDBOX_POOL_SIZE": "0"}
    with running_server(tmp_path / "data", tmp_path / "serve.log", env=serve_env) as (_, url):
        wait_for(lambda: delivered(sessions, before, 2), "the embedded grade's messages")
        reactions = httpx.get(f"{url}/readyz").json()["reactions"]
    by_server = messages_after(sessions, before)
    assert_all_reactions(reactions)

    # The same messages, whoever stored the grade.
    assert as_compared(by_worker) == as_compared(by_cli) == as_compared(by_server)
    assert platform.score_posts == 3 and len(receiver.events) == 3

    # 4. An instructor's override changes the counted score: the LMS gets it (no webhook: it
    # reports grades). Delivered by the API host, which finds it within its poll.
    before = last_message_id(sessions)
    with sessions.begin() as session:
        submission = session.get(Submission, submission_id)
        instructor = find_user_by_email(session, INSTRUCTOR)
        assert submission is not None and instructor is not None
        set_override(session, submission, score=4.0, reason="oral exam", by=instructor)
    wait_for(lambda: delivered(sessions, before, 1), "the override's score")
    assert [m.kind for m in messages_after(sessions, before)] == ["lti-score"]
    ((overridden,),) = [list(scores.values()) for scores in platform.scores.values()]
    assert overridden.score_given == 4 and len(receiver.events) == 3


def test_the_compose_check_s_lms_receives_a_worker_s_score(
    host_env: dict[str, str], api: httpx.Client, start_worker: Callable[..., Worker]
) -> None:
    """scripts/check_lti_passback.py, as check-compose.sh --up runs it in the stack."""
    start_worker()
    checked = subprocess.run(
        [sys.executable, "scripts/check_lti_passback.py", str(api.base_url), "tests/lti"],
        cwd=REPO, env={**os.environ, **host_env}, capture_output=True, text=True,
        timeout=2 * WAIT_SECONDS,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "the LMS received the score 10/10" in checked.stderr
