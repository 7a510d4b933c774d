"""What the signed-in viewer may do, named per domain: dependencies the pages declare instead of
checking by hand. Below the surfaces (app/web, app/api, app/lti), above who is viewing
(`app.access`), so that no page imports another for them.

- `InstructorCourseDep`: the course of the address (`course_id`), which the viewer instructs
  (an admin: any); refused as `require_instructor` refuses (403 or 404), or sign in first.
- `ReviewableSubmissionFormDep`: the submission of the address (`submission_id`), of a course
  the viewer instructs, for its review forms (its own learner: 403; anyone else: 404).

A `...FormDep` is for a form's POST: it checks the form's CSRF token first (as
`app.access.SignedInUserFormDep` does), whatever order a route declares its dependencies in.
The API's holders are `app.api_keys.ApiKeyDep` and `app.people.tokens.TokenHolderDep`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from sqlalchemy.orm import Session

from app.access import CsrfViewerDep, Viewer, ViewerDep, signed_in_user
from app.courses.membership import Forbidden, NotFound, require_instructor
from app.db import SessionDep
from app.grading.submissions import get_submission
from app.models import Course, Submission


def instructor_course(course_id: str, session: SessionDep, viewer: ViewerDep) -> Course:
    return require_instructor(session, signed_in_user(viewer), course_id)


def instructor_course_form(course_id: str, session: SessionDep, viewer: CsrfViewerDep) -> Course:
    return require_instructor(session, signed_in_user(viewer), course_id)


InstructorCourseDep = Annotated[Course, Depends(instructor_course)]
InstructorCourseFormDep = Annotated[Course, Depends(instructor_course_form)]


def _reviewable(session: Session, viewer: Viewer, submission_id: str) -> Submission:
    """A submission of a course the viewer teaches (a learner's own is 403 here, others 404)."""
    user = signed_in_user(viewer)
    submission = get_submission(session, submission_id)
    if submission is None:
        raise NotFound("There is no submission with this id.")
    if user.is_admin:
        return submission
    if submission.course_id is None:
        if submission.user_id == user.id:
            raise Forbidden("Only a course's instructors can change a score.")
        raise NotFound("There is no submission with this id, or it is not yours to see.")
    try:
        require_instructor(session, user, submission.course_id)
    except NotFound:
        if submission.user_id == user.id:
            raise Forbidden("Only a course's instructors can change a score.") from None
        raise NotFound("There is no submission with this id, or it is not yours to see.") from None
    return submission


def reviewable_submission_form(
    submission_id: str, session: SessionDep, viewer: CsrfViewerDep
) -> Submission:
    return _reviewable(session, viewer, submission_id)


ReviewableSubmissionFormDep = Annotated[Submission, Depends(reviewable_submission_form)]
