"""What an instructor reads of a course: the gradebook (and its CSV), an exercise's
statistics, the audit log.

A learner of the course gets 403 on every one of them; anyone not in the course, 404.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup

from app.access import ViewerDep
from app.audit import events
from app.charts import bar_chart
from app.courses.diagnosis_reports import reported_counts
from app.courses.gradebook import (
    FILTERS,
    build_gradebook,
    exercise_stats,
    gradebook_csv,
)
from app.courses.hints import (
    hint_open_counts,
)
from app.courses.membership import (
    assignment_of,
    assignments_of,
)
from app.db import SessionDep
from app.grading.regrades import (
    outdated_count,
)
from app.permissions import InstructorCourseDep
from app.rendering import csv_download, file_slug, render
from graders.report import diagnosis_name

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


@dataclass(frozen=True)
class GradebookQuery:
    """The gradebook's filter and sort, the same for the page and its CSV export."""

    q: str = ""
    only: str = "all"
    exercise: str = ""
    sort: str = "name"
    order: str = "asc"


GradebookQueryDep = Annotated[GradebookQuery, Depends()]


@router.get("/courses/{course_id}/gradebook")
def gradebook_page(
    request: Request,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
    query: GradebookQueryDep,
) -> HTMLResponse:
    book = build_gradebook(session, course, **asdict(query))
    shown = {"q": book.q, "only": book.only, "exercise": book.exercise}

    def sort_link(key: str) -> str:
        direction = "desc" if book.sort == key and book.order == "asc" else "asc"
        if book.sort != key and key not in ("name", "email"):
            direction = "desc"  # scores: highest first on the first click
        return "?" + urlencode({**shown, "sort": key, "order": direction})

    assigned = assignments_of(session, course.id)
    return render(
        request,
        viewer,
        "gradebook.html",
        {
            "course": course,
            "book": book,
            "filters": FILTERS,
            "all_exercises": assigned,
            # Each column's place in the course's order, also when one exercise is shown.
            "numbers": {a.id: place for place, a in enumerate(assigned, start=1)},
            "removed": assignments_of(session, course.id, removed=True),
            "sort_link": sort_link,
            "csv_link": f"/courses/{course.id}/gradebook.csv?"
            + urlencode({**shown, "sort": book.sort, "order": book.order}),
        },
    )


@router.get("/courses/{course_id}/gradebook.csv", response_model=None)
def gradebook_csv_export(
    session: SessionDep, course: InstructorCourseDep, query: GradebookQueryDep
) -> Response:
    """Exactly the rows, columns and order of the page with the same query."""
    book = build_gradebook(session, course, **asdict(query))
    return csv_download(gradebook_csv(book), f"{file_slug(course.name, 'course')}-gradebook.csv")


@router.get("/courses/{course_id}/exercises/{exercise_id}/stats")
def statistics_page(
    request: Request,
    exercise_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
) -> HTMLResponse:
    assigned = assignment_of(session, course.id, exercise_id)
    stats = exercise_stats(session, course, assigned)
    return render(
        request,
        viewer,
        "stats.html",
        {
            "course": course,
            "assigned": assigned,
            "stats": stats,
            "exercises": assignments_of(session, course.id),
            "outdated": outdated_count(session, course_id=course.id, exercise_id=assigned.id),
            "reported": reported_counts(session, course.id, assigned.id),
            "hints_opened": hint_open_counts(session, course.id, assigned.id),
            "diagnoses_chart": Markup(
                bar_chart(
                    "Submissions by diagnosis",
                    [(diagnosis_name(code), count) for code, count, _ in stats.diagnoses],
                    chart_id="diagnoses",
                )
            ),
            "scores_chart": Markup(
                bar_chart(
                    "Learners by counted score",
                    stats.score_distribution,
                    chart_id="scores",
                )
            ),
        },
    )


@router.get("/courses/{course_id}/audit")
def audit_page(
    request: Request,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
) -> HTMLResponse:
    return render(
        request,
        viewer,
        "audit.html",
        {"course": course, "events": events(session, course_id=course.id)},
    )
