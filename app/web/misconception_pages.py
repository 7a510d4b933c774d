"""The instructor's misconception map and item analysis of one exercise, and their CSV.

Only a course's instructors see them (a learner of the course gets 403, anyone else 404): they
name learners and link to their code.
"""

from __future__ import annotations

import csv
import enum
import io

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup

from app.access import ViewerDep
from app.charts import bar_chart, transition_chart
from app.courses.attempts import learner_attempts
from app.courses.counted import span_words
from app.courses.gradebook import csv_text
from app.courses.hints import hints_opened_by
from app.courses.item_analysis import ItemAnalysis, item_analysis
from app.courses.membership import assignment_of, assignments_of
from app.courses.misconceptions import START, MisconceptionMap, misconception_map
from app.db import SessionDep
from app.models import utc_now
from app.permissions import InstructorCourseDep
from app.rendering import csv_download, file_slug, render
from graders.report import diagnosis_name

router = APIRouter(include_in_schema=False, default_response_class=HTMLResponse)


class MapTable(enum.StrEnum):
    """The tables the map's CSV gives, one at a time."""

    MOVES = "moves"
    STAYS = "stays"
    STUCK = "stuck"
    ATTEMPTS = "attempts"
    CHECKS = "checks"


def state_name(code: str) -> str:
    return "Start" if code == START else diagnosis_name(code)


def duration(hours: float) -> str:
    return span_words(hours * 3600)


def _hours(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _table_rows(table: MapTable, found: MisconceptionMap, items: ItemAnalysis) -> list[list[str]]:
    if table is MapTable.MOVES:
        return [["from", "to", "moves", "learners"]] + [
            [m.source, m.target, str(m.moves), str(m.learners)] for m in found.moves
        ]
    if table is MapTable.STAYS:
        return [
            ["diagnosis", "learners", "stays", "median_attempts", "median_hours", "still_there"]
        ] + [
            [
                s.diagnosis,
                str(s.learners),
                str(s.stays),
                f"{s.median_attempts:g}",
                _hours(s.median_hours),
                str(s.still_there),
            ]
            for s in found.stays
        ]
    if table is MapTable.STUCK:
        return [["learner", "email", "reason", "latest_diagnosis", "latest_at", "submission"]] + [
            [
                csv_text(s.learner.name),
                csv_text(s.learner.email),
                s.reason,
                s.latest.diagnosis,
                s.latest.at.isoformat(),
                s.latest.submission_id,
            ]
            for s in found.stuck
        ]
    if table is MapTable.CHECKS:
        return [["check", "attempts", "passed_percent", "learners_failing_now"]] + [
            [csv_text(c.check_id), str(c.attempts), f"{c.passed_percent:.1f}", str(c.failing_now)]
            for c in items.checks
        ]
    return [["attempt", "attempts", "learners", "mean_percent", "full_marks_percent"]] + [
        [
            row.label,
            str(row.attempts),
            str(row.learners),
            f"{row.mean_percent:.1f}",
            f"{row.solved_percent:.1f}",
        ]
        for row in items.by_attempt
    ]


@router.get("/courses/{course_id}/exercises/{exercise_id}/map")
def misconception_map_page(
    request: Request,
    exercise_id: str,
    session: SessionDep,
    viewer: ViewerDep,
    course: InstructorCourseDep,
) -> HTMLResponse:
    assigned = assignment_of(session, course.id, exercise_id)
    learners = learner_attempts(session, course.id, assigned.id)
    found = misconception_map(learners, now=utc_now())
    items = item_analysis(learners)
    counts = {(m.source, m.target): m.moves for m in found.moves}
    return render(
        request,
        viewer,
        "misconceptions.html",
        {
            "course": course,
            "assigned": assigned,
            "exercises": assignments_of(session, course.id),
            "found": found,
            "items": items,
            # Beside each stuck learner, the hints they opened (by account id).
            "hints_opened": hints_opened_by(session, course.id, assigned.id),
            "tables": list(MapTable),
            "state_name": state_name,
            "duration": duration,
            "moves_chart": Markup(
                transition_chart(
                    "Moves between diagnoses (attempt to next attempt)",
                    [(code, state_name(code)) for code in found.states],
                    counts,
                    chart_id="moves",
                )
            ),
            "histograms": [
                Markup(bar_chart(title, bars, chart_id=chart_id))
                for title, bars, chart_id in (
                    ("Learners by first attempt's score", items.first, "first-scores"),
                    ("Learners by latest attempt's score", items.last, "last-scores"),
                    ("Learners by best score", items.best, "best-scores"),
                    ("Solvers by time from first open to solved", items.solve_times, "solve"),
                )
            ],
        },
    )


@router.get("/courses/{course_id}/exercises/{exercise_id}/map.csv", response_model=None)
def misconception_map_csv(
    exercise_id: str,
    session: SessionDep,
    course: InstructorCourseDep,
    table: MapTable = MapTable.MOVES,
) -> Response:
    assigned = assignment_of(session, course.id, exercise_id)
    learners = learner_attempts(session, course.id, assigned.id)
    rows = _table_rows(table, misconception_map(learners, now=utc_now()), item_analysis(learners))
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    name = f"{file_slug(course.name, 'course')}-{assigned.id}-{table}.csv"
    return csv_download(out.getvalue(), name)
