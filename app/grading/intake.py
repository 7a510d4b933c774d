"""The one way a submission comes in, from every surface: the API (JSON or upload), the web
form and the LTI launch all call `accept_submission`.

It reads an upload under the size cap, takes the code out of a notebook, answers a retry
with an `Idempotency-Key` with the submission the first request made, validates and stores
the submission (queued for grading once the transaction commits). Code that does not compile
is refused first (`CodeSyntaxError`, with its line): no row, no attempt, no grading run. Every
refusal is a `SubmissionRejected` that carries its HTTP status.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import BinaryIO

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.courses.membership import AssignedExercise
from app.grading.submissions import (
    CodeTooLarge,
    SubmissionLimits,
    SubmissionRejected,
    check_code,
    create_submission,
)
from app.models import IdempotencyKey, Submission, utc_now
from app.rate_limits import RateLimit
from app.settings import Settings
from graders.harness import compile_submission
from graders.notebook import ExtractedCode, NotebookError, clean_filename, code_from_file

MAX_IDEMPOTENCY_KEY_CHARS = 255


class IdempotencyKeyReused(SubmissionRejected):
    """The key was sent before with a different request."""

    status_code = 422
    title = "Idempotency-Key reused"


@dataclass(frozen=True)
class Upload:
    """A file as the client sent it: its name and a stream to read it from."""

    filename: str
    stream: BinaryIO


@dataclass(frozen=True)
class Idempotency:
    """A client's `Idempotency-Key` and who chose it (retries are matched within one owner)."""

    owner: str
    key: str

    @classmethod
    def from_header(cls, owner: str, header: str | None) -> Idempotency | None:
        if header is None:
            return None
        if not 1 <= len(header) <= MAX_IDEMPOTENCY_KEY_CHARS or not all(
            "!" <= c <= "~" for c in header
        ):
            raise SubmissionRejected(
                f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} visible ASCII "
                "characters (a UUID is a good one); this one is not"
            )
        return cls(owner, header)


@dataclass(frozen=True)
class Accepted:
    submission: Submission
    # What was left out of an uploaded notebook, said for the learner.
    notices: list[str] = field(default_factory=list)
    # True when an earlier request with the same Idempotency-Key made the submission.
    replayed: bool = False


def accept_submission(
    session: Session,
    settings: Settings,
    *,
    exercise_id: str,
    learner: str,
    code: str = "",
    upload: Upload | None = None,
    api_key_id: str | None = None,
    user_id: str | None = None,
    course_id: str | None = None,
    assigned: AssignedExercise | None = None,
    idempotency: Idempotency | None = None,
    client_address: str | None = None,
    personal_token_id: str | None = None,
) -> Accepted:
    """Take one submission in. Raises SubmissionRejected (with its status) if refused.

    `client_address` (from the pages) limits anonymous practice per address too.
    """
    filename, notices = None, list[str]()
    if upload is not None and upload.filename:
        extracted = _code_from_upload(upload, settings.max_upload_bytes)
        code, notices, filename = extracted.source, extracted.notices, extracted.filename

    # Before the key is claimed and before any row or rate count: not an attempt. After the
    # text's own checks (size, NUL), which say first what is wrong with the text itself.
    check_code(code, settings.max_code_bytes)
    check_syntax(code)
    request_sha256 = _fingerprint(exercise_id, learner, code, filename, course_id)
    if idempotency is not None:
        earlier = _claim_key(session, idempotency, request_sha256)
        if earlier is not None:
            return Accepted(earlier, earlier.upload_notices or [], replayed=True)

    submission = create_submission(
        session,
        exercise_id=exercise_id,
        learner=learner,
        code=code,
        api_key_id=api_key_id,
        user_id=user_id,
        course_id=course_id,
        assigned=assigned,
        limits=submission_limits(settings),
        client_address=client_address,
        upload_filename=filename,
        upload_notices=notices,
        personal_token_id=personal_token_id,
    )
    if idempotency is not None:
        session.execute(
            update(IdempotencyKey)
            .where(IdempotencyKey.owner == idempotency.owner, IdempotencyKey.key == idempotency.key)
            .values(submission_id=submission.id)
            .execution_options(synchronize_session=False)
        )
    return Accepted(submission, notices)


class CodeSyntaxError(SubmissionRejected):
    """The code does not compile: said at once, with its line, and never graded or counted."""

    status_code = 422
    title = "Syntax error"

    def __init__(self, line: int | None, problem: str) -> None:
        where = f"on line {line}" if line else "in your code"
        super().__init__(
            f"Syntax error {where}: {problem}. Fix it and submit again; "
            "this was not graded and does not count as an attempt."
        )
        self.line = line

    def json_fields(self) -> dict[str, object]:
        return {"line": self.line}


def check_syntax(code: str) -> None:
    """Refuse code that does not compile, with the same `compile` the harness runs it with.

    Anything else compile() might raise (a NUL byte, code nested too deep for the compiler)
    is left to the sandbox, which grades it as it does today.
    """
    try:
        compile_submission(code)
    except SyntaxError as exc:
        # The message and line are Python's, about the learner's text: shown escaped, capped.
        raise CodeSyntaxError(exc.lineno, (exc.msg or "invalid syntax")[:300]) from None
    except Exception:
        return


def submission_limits(settings: Settings) -> SubmissionLimits:
    window = settings.submission_rate_window_seconds
    return SubmissionLimits(
        per_learner=RateLimit(settings.submission_rate_limit, window),
        anonymous_per_address=RateLimit(settings.anonymous_submission_rate_limit, window),
        anonymous_in_total=RateLimit(settings.anonymous_submissions_per_hour_in_total, 3600),
        max_waiting=settings.max_waiting_submissions or None,
    )


def _code_from_upload(upload: Upload, max_upload_bytes: int) -> ExtractedCode:
    data = upload.stream.read(max_upload_bytes + 1)
    if len(data) > max_upload_bytes:
        raise CodeTooLarge(
            f"{clean_filename(upload.filename)[:60]} is over the upload limit of "
            f"{max_upload_bytes} bytes ({max_upload_bytes // 1024} KiB)"
        )
    try:
        return code_from_file(upload.filename, data)
    except NotebookError as exc:
        raise SubmissionRejected(str(exc)) from None


def _fingerprint(
    exercise_id: str, learner: str, code: str, filename: str | None, course_id: str | None
) -> str:
    request = [exercise_id, learner, code, filename, course_id]
    return hashlib.sha256(json.dumps(request, ensure_ascii=True).encode()).hexdigest()


def _claim_key(
    session: Session, idempotency: Idempotency, request_sha256: str
) -> Submission | None:
    """Claim the key for this request, or return the submission an earlier one made with it.

    The key row is inserted first, with ON CONFLICT DO NOTHING: of two requests racing with
    one key, the second waits for the first's transaction and then finds its row, so a
    retry never makes a second submission. A rolled-back request leaves no key behind.
    """
    values = {
        "owner": idempotency.owner,
        "key": idempotency.key,
        "request_sha256": request_sha256,
        "created_at": utc_now(),
    }
    # Core's generic insert has no ON CONFLICT; both engines loopgrade runs on have one.
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(IdempotencyKey)
    # RETURNING says whether the row went in: rowcount is -1 for this on psycopg 3.
    inserted = session.execute(
        statement.values(values).on_conflict_do_nothing().returning(IdempotencyKey.key)
    ).first()
    if inserted is not None:
        return None
    earlier = session.execute(
        select(IdempotencyKey).where(
            IdempotencyKey.owner == idempotency.owner, IdempotencyKey.key == idempotency.key
        )
    ).scalar_one()
    if earlier.request_sha256 != request_sha256:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {idempotency.key!r} was already used for a different submission; "
            "send a new key for new code (reuse a key only to retry the very same request)"
        )
    # Committed rows always have it: it is set in the transaction that inserted the key.
    submission = session.get(Submission, earlier.submission_id or "")
    assert submission is not None
    return submission
