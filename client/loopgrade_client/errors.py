"""Every failure the client reports, each with a sentence a learner can act on."""

from __future__ import annotations


class ClientError(Exception):
    """Anything that stops a command; `str()` is the message shown."""


class TokenRejected(ClientError):
    """401: a missing, unknown, revoked or expired token."""


class NotFound(ClientError):
    """404: no such exercise, course or submission of yours."""


class Refused(ClientError):
    """Another 4xx: the server says what is wrong with the request."""


class WaitAndRetry(ClientError):
    """429 (your rate limit) or 503 (the server is busy): try again after `retry_after_seconds`."""

    def __init__(self, message: str, retry_after_seconds: int | None) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class ServerBusy(WaitAndRetry):
    """503: the server is busy and stored nothing; its Retry-After says when it expects room."""


class Offline(ClientError):
    """The server could not be reached at all."""


class BadAnswer(ClientError):
    """The server answered something that is not loopgrade's: garbage, too big, wrong types."""
