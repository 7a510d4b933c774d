"""Errors a client or a person can act on. Each carries the HTTP status it is answered with.

One handler (`app.main`) answers them: JSON `{"detail": message}` under `/api/`, a styled
page everywhere else. A domain error subclasses `AppError` and sets `status_code` and `title`.
"""

from __future__ import annotations


class AppError(Exception):
    """Refuse a request with `status_code`, a short `title` and a message that says what to do."""

    status_code: int = 400
    title: str = "Bad request"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}

    def json_fields(self) -> dict[str, object]:
        """Fields a JSON answer carries beside `detail` (a line number, say)."""
        return {}


def as_sentence(message: str) -> str:
    """A domain error's message ("the course needs a name", as the API says it) as a sentence
    for a page: "The course needs a name."."""
    message = message.strip()
    if not message:
        return message
    return message[:1].upper() + message[1:] + ("" if message[-1] in ".!?" else ".")
