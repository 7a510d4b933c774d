"""Redis restarted with submissions queued in it (and none kept: no persistence): none lost."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from app.db import SessionFactory
from tests.hosts.conftest import Worker
from tests.hosts.test_faults import MISSING_FUNCTION_CODE, all_finished, rows, submit, wait_for
from tests.services import RedisServer


@pytest.fixture
def redis_url(own_redis: RedisServer) -> str:
    """This module's tests kill their broker: never the shared one."""
    return own_redis.url


def test_a_redis_restart_with_submissions_queued_loses_none(
    api: httpx.Client,
    auth: dict[str, str],
    sessions: SessionFactory,
    own_redis: RedisServer,
    start_worker: Callable[..., Worker],
) -> None:
    # No worker yet: the messages wait in Redis, which then dies with them (no persistence).
    queued = [submit(api, auth, f"learner-{n}", MISSING_FUNCTION_CODE) for n in range(3)]
    own_redis.kill()
    # Accepted while the broker is down: stored, the send fails, the sweep sends it later.
    queued.append(submit(api, auth, "while-redis-is-down", MISSING_FUNCTION_CODE))
    own_redis.start()

    start_worker()
    wait_for(lambda: all_finished(sessions, queued), "every queued submission")
    for row in rows(sessions, queued).values():
        assert (row.status, row.diagnosis, row.attempts) == ("graded", "missing-function", 1)
