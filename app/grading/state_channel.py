"""Submission state changes from Celery workers to the web processes, over Redis pub/sub.

A worker publishes `{"id": ..., "status": ...}` on its queue's channel each time it commits a
change to a submission (claimed: running; graded; error; queued again for a retry). Every web
process runs one `StateSubscriber` thread that hands each message's id to the same callback
the in-process grading threads call (`ProgressStreams.state_changed`): the streams of that id
wake and re-read the row. So a message is believed in nothing but which row to re-read, and
only when its id is a UUID and its status one of ours; a forged message costs a re-read.

Pub/sub keeps nothing: a message sent while a subscriber is away is lost. A subscriber that
comes back wakes every stream once, and each stream still reads its row every
`event_check_interval_seconds`, so a lost message delays a result, never loses it.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import redis
from redis.backoff import EqualJitterBackoff, NoBackoff
from redis.retry import Retry

from app.models import SubmissionStatus
from app.settings import Settings

if TYPE_CHECKING:
    from app.grading.queue import StateChanged

log = logging.getLogger(__name__)

# A publish waits at most this for Redis: a grading is never held up by it.
PUBLISH_TIMEOUT_SECONDS = 1.0
# How often the subscriber looks up from its socket to see whether it should stop.
STOP_CHECK_SECONDS = 0.5
# Reconnecting: 0.5-1 s, 1-2 s, 2-4 s, ... up to 15-30 s between attempts; the jitter keeps
# many web processes from knocking on a Redis that comes back all at the same moment.
RECONNECT_BACKOFF = EqualJitterBackoff(base=0.5, cap=30.0)
# Far more than {"id": <36>, "status": <7>}: anything longer is not ours.
MAX_MESSAGE_BYTES = 256


def state_channel_url(settings: Settings) -> str | None:
    """The broker's Redis, which carries the state messages; None for another broker (then
    results reach the pages by the streams' database check alone)."""
    if urlsplit(settings.broker_url).scheme in ("redis", "rediss"):
        return settings.broker_url
    return None


def state_channel(settings: Settings) -> str:
    # One per queue: pub/sub ignores Redis database numbers, and two deployments sharing a
    # Redis already keep apart by their queues' names.
    return f"loopgrade:submission-state:{settings.worker_queue}"


def encode_state(submission_id: str, status: SubmissionStatus) -> bytes:
    return json.dumps({"id": submission_id, "status": status.value}).encode()


def decode_state(data: object) -> tuple[str, SubmissionStatus] | None:
    """(id, status) of a well-formed message, the id in its canonical form; None otherwise."""
    if not isinstance(data, bytes) or len(data) > MAX_MESSAGE_BYTES:
        return None
    try:
        message = json.loads(data)
        submission_id = str(uuid.UUID(message["id"]))
        return submission_id, SubmissionStatus(message["status"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


class StatePublisher:
    """What a Celery worker tells the web processes. Never raises: Redis away is logged."""

    def __init__(self, settings: Settings) -> None:
        url = state_channel_url(settings)
        self._channel = state_channel(settings)
        self._client = (
            None
            if url is None
            else redis.Redis.from_url(
                url,
                socket_connect_timeout=PUBLISH_TIMEOUT_SECONDS,
                socket_timeout=PUBLISH_TIMEOUT_SECONDS,
                # No retries with waits in between: a grading must not wait on Redis.
                retry=Retry(NoBackoff(), 0),
            )
        )

    def state_changed(self, submission_id: str, status: SubmissionStatus) -> None:
        if self._client is None:
            return
        try:
            self._client.publish(self._channel, encode_state(submission_id, status))
        except Exception as exc:
            log.warning(
                "submission %s: could not tell the web processes it is %s (%s: %s); "
                "their database check shows it instead",
                submission_id,
                status.value,
                type(exc).__name__,
                exc,
            )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


class StateSubscriber(threading.Thread):
    """One thread of a web process: the workers' messages to `on_state_change`, until `stop`.

    After every (re)subscription `on_reconnect` is called: messages sent meanwhile are lost.
    """

    def __init__(
        self,
        url: str,
        channel: str,
        on_state_change: StateChanged,
        on_reconnect: Callable[[], None],
    ) -> None:
        super().__init__(name="state-subscriber", daemon=True)
        self._url = url
        self._channel = channel
        self._on_state_change = on_state_change
        self._on_reconnect = on_reconnect
        self._stopped = threading.Event()
        self._failures = 0  # connection attempts failed in a row

    def stop(self) -> None:
        self._stopped.set()
        self.join()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._listen()
            except Exception as exc:
                self._failures += 1
                wait_seconds = RECONNECT_BACKOFF.compute(self._failures)
                log.warning(
                    "state messages from the workers: %s: %s; trying again in %.1f s "
                    "(meanwhile results reach the pages by their database check)",
                    type(exc).__name__,
                    exc,
                    wait_seconds,
                )
                self._stopped.wait(wait_seconds)

    def _listen(self) -> None:
        """Until stopped; raises when the connection fails."""
        client = redis.Redis.from_url(
            self._url,
            socket_connect_timeout=5,
            socket_keepalive=True,
            # A PING now and then keeps an idle connection open through NAT and proxies.
            health_check_interval=30,
            # Errors come to `run`, which waits before it reconnects and can be stopped.
            retry=Retry(NoBackoff(), 0),
        )
        # Typed from redis 8.2 on, untyped before: either way passes (pyproject: redis>=5.0).
        pubsub = client.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
        try:
            pubsub.subscribe(self._channel)
            while not self._stopped.is_set():
                message = pubsub.get_message(timeout=STOP_CHECK_SECONDS)
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    # Redis confirmed: every message published from now on comes here.
                    log.info("state messages from the workers: subscribed to %s", self._channel)
                    self._failures = 0
                    self._on_reconnect()
                elif message["type"] == "message":
                    self._handle(message["data"])
        finally:
            pubsub.close()
            client.close()

    def _handle(self, data: object) -> None:
        state = decode_state(data)
        if state is None:
            log.warning("state messages: ignored one that is not ours")
            return
        try:
            self._on_state_change(*state)
        except Exception:
            # A fault of ours, not of the connection: keep listening.
            log.exception("state messages: could not wake the streams of %s", state[0])
