"""The exercise page told 503 by a full grading queue: it says so, waits the Retry-After and sends
the code again with the same Idempotency-Key, and one submission is stored once there is room.

The test makes the queue full and frees it itself (a queued row of its own), never by timing;
nothing grades (the broker leads nowhere).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy import delete, func, select

from app.db import SessionFactory
from app.models import Submission, SubmissionStatus
from app.settings import Settings
from tests.app.conftest import CORRECT_CODE
from tests.browser.test_exercise_page import (
    DESKTOP_800,
    EXERCISE_PATH,
    NOWHERE_BROKER,
    open_page,
    write_code,
)
from tests.conftest import ScopeDatabase

FILLER = "queue-filler"
# The Retry-After of a queue whose drain rate is unknown is 1-5 s: the page's wait is bounded.
RESENT_WITHIN_MS = 60_000


@pytest.fixture(scope="module")
def server_settings(
    tmp_path_factory: pytest.TempPathFactory, scope_database: ScopeDatabase
) -> Iterator[Settings]:
    data_dir = tmp_path_factory.mktemp("busy-resend") / "data"
    with scope_database(data_dir) as database_url:
        # Anonymous practice gets half the queue: one place, taken by the filler.
        yield Settings(
            data_dir=data_dir,
            database_url=database_url,
            broker_url=NOWHERE_BROKER,
            sandbox_pool_size=0,
            max_waiting_submissions=2,
        )


def learner_submissions(sessions: SessionFactory) -> int:
    with sessions() as session:
        return (
            session.scalar(
                select(func.count()).select_from(Submission).where(Submission.learner != FILLER)
            )
            or 0
        )


def test_the_page_waits_the_retry_after_and_sends_the_code_again_with_its_key(
    browser: Browser, base_url: str, module_sessions: SessionFactory
) -> None:
    with module_sessions.begin() as session:
        session.add(
            Submission(
                exercise_id="train-step",
                exercise_version="v-test",
                learner=FILLER,
                code="pass\n",
                status=SubmissionStatus.QUEUED,
                attempts=0,
            )
        )
    page = open_page(browser, base_url, DESKTOP_800)
    page.goto(EXERCISE_PATH)
    write_code(page, CORRECT_CODE)
    page.keyboard.press("Control+Enter")
    status = page.locator("#live-result .status")
    expect(status).to_contain_text("The graders are busy: sending your code again in")
    expect(page.locator("#result-announcement")).to_contain_text("The graders are busy")
    expect(page.locator("#form-error")).to_be_hidden()
    assert learner_submissions(module_sessions) == 0  # refused: nothing stored

    with module_sessions.begin() as session:
        session.execute(delete(Submission).where(Submission.learner == FILLER))
    expect(status).to_contain_text("Queued", timeout=RESENT_WITHIN_MS)
    assert learner_submissions(module_sessions) == 1
    page.context.close()
