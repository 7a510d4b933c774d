"""The learner's API of a loopgrade server (`/api/v1/me`), over httpx.

Every answer is read as untrusted: bodies are capped, JSON is checked for the types used, and
anything else becomes a `BadAnswer` with a sentence, never a traceback. Results are waited for
on the submission's progress stream (server-sent events), not by polling.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loopgrade_client.errors import (
    BadAnswer,
    ClientError,
    NotFound,
    Offline,
    Refused,
    ServerBusy,
    TokenRejected,
    WaitAndRetry,
)
from loopgrade_client.local_check import checked_kit

# The largest JSON answer read (a practice kit is a few KiB).
MAX_ANSWER_BYTES = 4 * 1024 * 1024
# One line of the progress stream (`done` carries the rendered result) and the whole stream.
MAX_EVENT_LINE_BYTES = 1024 * 1024
MAX_STREAM_BYTES = 16 * 1024 * 1024
# How long `wait` follows a submission before it says to look later with `status`.
DEFAULT_WAIT_SECONDS = 600.0
# A submission the connection dropped under is sent again with its Idempotency-Key this often.
SUBMIT_ATTEMPTS = 3
# A busy server's Retry-After is waited, and the submission sent again with its key, while the
# waits add up to no more than this; a longer wait is the learner's to choose.
SUBMIT_BUSY_WAIT_SECONDS = 180
FINISHED = ("graded", "error")


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise BadAnswer(f"the server's answer has no text for {what}")
    return value


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadAnswer(f"the server's answer has no number for {what}")
    return float(value)


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadAnswer(f"the server's answer is not a JSON object where {what} should be")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise BadAnswer(f"the server's answer has no list of {what}")
    return value


@dataclass(frozen=True)
class CheckResult:
    id: str
    passed: bool
    points: float
    max_points: float
    message: str
    hidden: bool


@dataclass(frozen=True)
class Submission:
    """One of your submissions as the server reports it."""

    id: str
    exercise: str
    status: str
    score: float | None
    max_score: float | None
    diagnosis: str | None
    diagnosis_text: str | None
    checks: list[CheckResult]
    feedback: str | None
    page_url: str
    charts_svg: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    # The hints the learner may open for the diagnosis, and the first one (markdown).
    hint_count: int = 0
    first_hint: str | None = None
    # The reference solution, once the learner's course shows it (after the due date).
    solution: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def full_marks(self) -> bool:
        return (
            self.status == "graded"
            and self.score is not None
            and self.max_score is not None
            and self.score >= self.max_score
        )

    @classmethod
    def from_json(cls, data: Any) -> Submission:
        data = _object(data, "a submission")
        checks = []
        for value in _list(data.get("checks", []), "checks"):
            check = _object(value, "a check")
            checks.append(
                CheckResult(
                    id=_text(check.get("id"), "a check's id"),
                    passed=check.get("passed") is True,
                    points=_number(check.get("points"), "a check's points") or 0.0,
                    max_points=_number(check.get("max_points"), "a check's points") or 0.0,
                    message=_text(check.get("message", ""), "a check's message"),
                    hidden=check.get("hidden") is True,
                )
            )
        optional_text = {
            name: _text(data[name], name) if data.get(name) is not None else None
            for name in ("diagnosis", "diagnosis_text", "feedback", "first_hint", "solution")
        }
        return cls(
            id=_text(data.get("id"), "the submission's id"),
            exercise=_text(data.get("exercise"), "the exercise"),
            status=_text(data.get("status"), "the status"),
            score=_number(data.get("score"), "the score"),
            max_score=_number(data.get("max_score"), "the maximum score"),
            checks=checks,
            page_url=_text(data.get("page_url", ""), "the page's address"),
            charts_svg=[_text(v, "a chart") for v in _list(data.get("charts_svg", []), "charts")],
            notices=[_text(v, "a notice") for v in _list(data.get("notices", []), "notices")],
            hint_count=int(_number(data.get("hint_count"), "the hints' count") or 0),
            raw=data,
            **optional_text,
        )


class LoopgradeAPI:
    """`LoopgradeAPI(url, token)`: the calls the commands and the magic make."""

    def __init__(
        self, url: str, token: str, *, timeout_seconds: float = 30.0, transport: Any = None
    ) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "loopgrade-client"},
            timeout=timeout_seconds,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> LoopgradeAPI:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- the calls ----------------------------------------------------------------------

    def exercises(self) -> dict[str, Any]:
        """Practice and your courses, each exercise with your state."""
        data = _object(self._json("GET", "/api/v1/me/exercises"), "your exercises")
        _list(data.get("practice"), "practice exercises")
        for course in _list(data.get("courses"), "courses"):
            _list(_object(course, "a course").get("exercises"), "a course's exercises")
        return data

    def solution(self, exercise: str, course: str) -> str:
        """The reference solution of a course's exercise, once the course shows it to you."""
        for listed in self.exercises()["courses"]:
            if listed.get("id") != course:
                continue
            for one in _list(listed.get("exercises"), "a course's exercises"):
                if isinstance(one, dict) and one.get("id") == exercise:
                    if one.get("solution") is None:
                        raise NotFound(
                            f"your course does not show the reference solution of {exercise} "
                            "to you: it does after the due date (yours, if it was extended), "
                            "when your instructor chose to"
                        )
                    return _text(one["solution"], "the reference solution")
            raise NotFound(
                f"this course does not set the exercise {exercise!r}: "
                "'loopgrade-client exercises' lists its exercises"
            )
        raise NotFound(f"you are in no course {course!r}: 'loopgrade-client exercises' lists yours")

    def submit(
        self,
        exercise: str,
        *,
        code: str | None = None,
        path: Path | None = None,
        course: str | None = None,
    ) -> str:
        """Send code (or a `.py`/`.ipynb` file); returns the submission's id once stored.

        One Idempotency-Key for all attempts: a retry after a dropped connection, or after the
        wait a busy server asked for (its Retry-After), never makes a second submission.
        """
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        busy_waited_seconds = 0
        attempt = 0
        while True:
            try:
                if path is not None:
                    form = {"exercise": exercise, **({"course": course} if course else {})}
                    files = {"file": (path.name, path.read_bytes())}
                    answer = self._json(
                        "POST",
                        "/api/v1/me/submissions/upload",
                        data=form,
                        files=files,
                        headers=headers,
                    )
                else:
                    body = {"exercise": exercise, "code": code or "", "course": course}
                    answer = self._json(
                        "POST", "/api/v1/me/submissions", json=body, headers=headers
                    )
                return _text(_object(answer, "the receipt").get("id"), "the submission's id")
            except Offline:
                attempt += 1
                if attempt == SUBMIT_ATTEMPTS:
                    raise
                time.sleep(attempt)
            except ServerBusy as busy:
                wait = busy.retry_after_seconds
                if wait is None or busy_waited_seconds + wait > SUBMIT_BUSY_WAIT_SECONDS:
                    raise
                time.sleep(wait)
                busy_waited_seconds += wait

    def submission(self, submission_id: str) -> Submission:
        return Submission.from_json(self._json("GET", f"/api/v1/me/submissions/{submission_id}"))

    def practice_kit(self, exercise: str) -> dict[str, Any]:
        """The exercise's visible cases and the reference's records, checked (checked_kit)."""
        return checked_kit(self._json("GET", f"/api/v1/me/exercises/{exercise}/practice-kit"))

    def practice_check(self, exercise: str, trace: dict[str, Any]) -> dict[str, Any]:
        """The server's diagnosis and words for a trace of the visible cases (not a grade)."""
        answer = _object(
            self._json(
                "POST", f"/api/v1/me/exercises/{exercise}/practice-check", json={"trace": trace}
            ),
            "the check",
        )
        for name in ("diagnosis", "diagnosis_text", "feedback"):
            _text(answer.get(name), name)
        for check in _list(answer.get("checks"), "checks"):
            check = _object(check, "a check")
            _text(check.get("id"), "a check's id")
            _text(check.get("message"), "a check's message")
            if not isinstance(check.get("passed"), bool):
                raise BadAnswer("the server's answer has no pass or fail for a check")
        return answer

    def wait(self, submission_id: str, *, max_seconds: float = DEFAULT_WAIT_SECONDS) -> Submission:
        """Follow the submission's progress stream until it is done; then read it."""
        deadline = time.monotonic() + max_seconds
        while True:
            retry_after = self._follow(submission_id)
            if retry_after is None:
                return self.submission(submission_id)
            # The stream ended early (its lifetime, the server's restart, too many streams).
            submission = self.submission(submission_id)
            if submission.finished:
                return submission
            if time.monotonic() + retry_after > deadline:
                raise ClientError(
                    f"still {submission.status} after {int(max_seconds)} s: see it later with "
                    f"'loopgrade-client status {submission_id}'"
                )
            time.sleep(retry_after)

    # --- HTTP ---------------------------------------------------------------------------

    def _follow(self, submission_id: str) -> float | None:
        """Read the progress stream: None once `done` came, else seconds to wait to reconnect."""
        path = f"/api/v1/me/submissions/{submission_id}/events"
        try:
            with self._client.stream(
                "GET", path, timeout=httpx.Timeout(30.0, read=120.0)
            ) as response:
                if response.status_code != 200:
                    error = self._error(response, _read_capped(response))
                    if isinstance(error, WaitAndRetry):
                        return float(error.retry_after_seconds or 5)
                    raise error
                for event in _events(response.iter_bytes()):
                    if event == "done":
                        return None
                    if event == "busy":
                        return 5.0
        except (httpx.TransportError, httpx.StreamError):
            return 2.0
        return 1.0

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            with self._client.stream(method, path, **kwargs) as response:
                body = _read_capped(response)
                if response.status_code >= 400:
                    raise self._error(response, body)
                if response.status_code not in (200, 202):
                    raise BadAnswer(f"the server answered {response.status_code} to {path}")
        except httpx.TimeoutException:
            raise Offline(f"{self.url} did not answer in time: try again later") from None
        except httpx.TransportError as exc:
            raise Offline(
                f"cannot reach {self.url} ({type(exc).__name__}): are you online, and is the "
                "address the one you logged in with?"
            ) from None
        try:
            return json.loads(body)
        except ValueError:
            raise BadAnswer(
                f"{self.url} answered {path} with something that is not JSON: is it a "
                "loopgrade server?"
            ) from None

    def _error(self, response: httpx.Response, body: bytes) -> ClientError:
        detail = _detail(body)
        code = response.status_code
        retry_after = _retry_after(response.headers.get("retry-after"))
        if code == 401:
            # loopgrade's own detail says what to do; said once, not twice.
            return TokenRejected(
                f"the server refused your token: {detail}"
                if detail
                else "the server refused your token: create a new one and run "
                "'loopgrade-client login URL' again"
            )
        if code == 404:
            return NotFound(detail or "not found")
        if code in (429, 503):
            what = "rate limit reached" if code == 429 else "the server is busy"
            said = f"{what}: {detail or 'try again later'}"
            # loopgrade's detail names the wait already ("... again in 30 s."): said once.
            if retry_after is not None and f"{retry_after} s" not in said:
                said = f"{said.rstrip('.')}; try again in {retry_after} s"
            return (WaitAndRetry if code == 429 else ServerBusy)(said, retry_after)
        if 400 <= code < 500:
            return Refused(detail or f"the server refused the request ({code})")
        return ClientError(f"the server failed ({code}): try again later, or tell your instructor")


def _read_capped(response: httpx.Response) -> bytes:
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise BadAnswer(
                f"the server's answer is over {MAX_ANSWER_BYTES // (1024 * 1024)} MiB: not "
                "loopgrade's; check the URL you logged in with"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _detail(body: bytes) -> str:
    """The `detail` of an error answer, one line and short; '' when there is none."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    detail = data.get("detail") if isinstance(data, dict) else None
    if isinstance(detail, list):  # a validation error: its messages
        detail = "; ".join(str(item.get("msg", "")) for item in detail if isinstance(item, dict))
    if not isinstance(detail, str):
        return ""
    return " ".join(detail.split())[:500]


def _retry_after(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return min(int(value), 24 * 3600)


def _events(chunks: Iterator[bytes]) -> Iterator[str]:
    """The names of the server-sent events in a byte stream, each line and all of it capped."""
    buffer = b""
    total = 0
    event = ""
    for chunk in chunks:
        total += len(chunk)
        if total > MAX_STREAM_BYTES:
            raise BadAnswer("the progress stream is far longer than loopgrade's")
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            line = line.rstrip(b"\r")
            if line.startswith(b"event:"):
                event = line[6:].strip().decode("utf-8", "replace")
            elif not line:
                if event:
                    yield event
                event = ""
        if len(buffer) > MAX_EVENT_LINE_BYTES:
            raise BadAnswer("a line of the progress stream is far longer than loopgrade's")
