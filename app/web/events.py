"""The submission page's progress stream: `GET /submissions/{id}/events` (text/event-stream;
the same access rules as the submission page), whose `done` carries the rendered result section
and the line it marks in the code (static/result.js). The stream itself is app/progress.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.access import ViewerDep
from app.db import SessionDep, SessionFactory
from app.models import Submission
from app.progress import progress_stream_response
from app.rendering import templates
from app.web.submission_view import result_context, viewable_submission

router = APIRouter(include_in_schema=False)


def read_done(sessions: SessionFactory, submission_id: str) -> dict[str, Any]:
    """The finished result as the submission page shows it, and the line it points at."""
    with sessions() as session:
        submission = session.get(Submission, submission_id)
        assert submission is not None
        context = result_context(session, submission)
        return {
            "status": submission.status,
            "url": f"/submissions/{submission_id}",
            "html": templates.get_template("_result.html").render(context),
            "line": context["error_line"],
        }


@router.get("/submissions/{submission_id}/events")
def submission_events(
    request: Request, submission_id: str, viewer: ViewerDep, session: SessionDep
) -> StreamingResponse:
    # The request's own session (the viewer's): a second one would hold a second connection
    # of the pool that admission control sized at one per request (app/admission.py).
    viewable_submission(request, session, viewer, submission_id)
    return progress_stream_response(request, submission_id, read_done)
