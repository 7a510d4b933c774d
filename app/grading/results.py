"""A graded result as stored and as shown: every text, list and series of it bounded.

A result is built from the sandbox's trace, which is hostile: a forged trace once made a 215 MiB
page. `bounded_report` caps what is stored; `shown_result` caps again what a page or an API
answer takes from a stored row (rows from before these caps, or written by other means), so
that no page or answer grows with what a submission made its trace say.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.models import Submission
from graders.diagnoses import UnknownDiagnosis
from graders.exercises import UnknownExercise, get_exercise
from graders.feedback import render
from graders.grading import MAX_OUTPUT_CHARS, RUN_FAILED
from graders.notebook import MAX_NOTICES
from graders.report import Check, GradeReport, PlotSeries
from graders.sentences import worded

log = logging.getLogger(__name__)

# Each cap is in characters; escaped for HTML a character may take up to 5 bytes, and the caps
# together keep a page under 300 KB (tests/app/test_bounded.py) with any trace behind it.
MAX_FEEDBACK_CHARS = 6000
# The first failure is also the feedback's start, which shows it longer.
MAX_CHECK_MESSAGE_CHARS = 1000
# A check's sentence as stored, its key and values (graders.sentences): ours are a few hundred.
MAX_SAID_CHARS = 4000
MAX_CHECKS = 12
MAX_CLAIMS = 8
# The facts' sentences (graders.diagnosis.verdict): a main fit's and another fit's, a few more.
MAX_FACTS = 4
MAX_PLOTS = 8
# The harness sends at most 10,000 losses and an exercise takes a few dozen steps: a longer
# series is forged. Charts draw at most a few hundred points of whatever is kept (app/charts).
MAX_SERIES_POINTS = 2000
MAX_LABEL_CHARS = 60
# A replayed fix's line is named in a short sentence (graders/fix_replay.py).
MAX_FIXED_LABEL_CHARS = 80
MAX_NOTICE_CHARS = 300
MAX_ERROR_MESSAGE_CHARS = 2000


def cut(text: str, max_chars: int) -> str:
    """`text`, or its start and a note saying how much was cut."""
    if len(text) <= max_chars:
        return text
    note = f"\n… ({len(text) - max_chars} more characters cut)"
    return text[: max_chars - len(note)] + note


_FENCE = re.compile(r"^(`{3,})")
_TICKS = re.compile(r"`+")


def cut_markdown(text: str, max_chars: int) -> str:
    """`cut` for markdown: never inside a code span, and a fenced block cut is closed, so that
    the rest of the page is not rendered as code."""
    if len(text) <= max_chars:
        return text
    # Room for the note and for closing a fence.
    kept = text[: max(0, max_chars - len(f"\n… ({len(text)} more characters cut)") - 24)]
    fence = ""
    paragraph_start = 0
    offset = 0
    for line in kept.splitlines(keepends=True):
        opened = _FENCE.match(line)
        if fence:
            if line.strip() and set(line.strip()) == {"`"} and len(line.strip()) >= len(fence):
                fence = ""
                paragraph_start = offset + len(line)
        elif opened:
            fence = opened.group(1)
        offset += len(line)
    if fence:
        return f"{kept.rstrip(chr(10))}\n{fence}\n… ({len(text) - len(kept)} more characters cut)"
    # Outside fences, pair the code spans' backtick runs: an opener left unpaired is cut off.
    runs = list(_TICKS.finditer(kept, paragraph_start))
    open_run = None
    for run in runs:
        if open_run is None:
            open_run = run
        elif len(run.group()) == len(open_run.group()):
            open_run = None
    if open_run is not None:
        kept = kept[: open_run.start()]
    kept = kept.rstrip()
    return f"{kept}\n… ({len(text) - len(kept)} more characters cut)"


def _bounded_check(check: Check) -> Check:
    said = check.said
    if said is not None and len(said.model_dump_json()) > MAX_SAID_CHARS:
        said = None  # values no sentence of ours makes: the message as it was said stands
    return check.model_copy(
        update={
            "id": cut(check.id, MAX_LABEL_CHARS),
            "message": cut_markdown(check.message, MAX_CHECK_MESSAGE_CHARS),
            "said": said,
        }
    )


def _worded_check(check: Check) -> Check:
    """The check as read: its message made now from its sentence (`graders.sentences`), or
    the message stored with it when this version cannot word it (a sentence since removed)."""
    if check.said is None:
        return check
    words = worded(check.said)
    return check.model_copy(
        update={"message": check.message if words is None else words, "said": None}
    )


def _bounded_plot(plot: PlotSeries) -> PlotSeries:
    return PlotSeries(
        case=cut(plot.case, MAX_LABEL_CHARS),
        label=cut(plot.label, MAX_LABEL_CHARS),
        learner=plot.learner[:MAX_SERIES_POINTS],
        reference=plot.reference[:MAX_SERIES_POINTS],
        steps=plot.steps[:MAX_SERIES_POINTS],
        fixed=plot.fixed[:MAX_SERIES_POINTS],
        fixed_label=cut(plot.fixed_label, MAX_FIXED_LABEL_CHARS),
    )


def stored_feedback(report: GradeReport) -> dict[str, Any]:
    """The columns a report's feedback is stored in: its facts as said then, and the keys of
    its claims with the facts' sentences (each a dict, `graders.sentences.Said`), when the
    words rendered from them when read (`_rendered_feedback`) are the feedback it was graded
    with; else the feedback whole, as it was said (a report made another way)."""
    try:
        exercise = get_exercise(report.exercise)
        rendered = render(report.facts, report.diagnosis, exercise, report.claims)
    except (UnknownExercise, UnknownDiagnosis):
        rendered = None
    if rendered != report.feedback:
        return {"feedback": report.feedback, "feedback_claims": None}
    facts = [said.model_dump() for said in report.facts_said]
    if _worded_facts(facts) != report.facts:
        facts = []  # sentences that do not say these facts: the facts stand as said
    return {"feedback": report.facts, "feedback_claims": [*report.claims, *facts]}


def _worded_facts(stored: list[Any]) -> str | None:
    """The facts worded now from their stored sentences; None when there are none, or one this
    version cannot word (a sentence since removed), or more than a grade of ours stores."""
    if not stored or len(stored) > MAX_FACTS:
        return None
    words = []
    for said in stored:
        if len(str(said)) > MAX_SAID_CHARS or (text := worded(said)) is None:
            return None
        words.append(text)
    return "\n\n".join(words)


def bounded_report(report: GradeReport) -> GradeReport:
    """The report as it may be stored: texts, checks, plots and series cut to their caps."""
    return report.model_copy(
        update={
            "feedback": cut_markdown(report.feedback, MAX_FEEDBACK_CHARS),
            "facts": cut_markdown(report.facts, MAX_FEEDBACK_CHARS),
            "facts_said": report.facts_said[:MAX_FACTS],
            "claims": [cut(key, MAX_LABEL_CHARS) for key in report.claims[:MAX_CLAIMS]],
            "checks": [_bounded_check(check) for check in report.checks[:MAX_CHECKS]],
            "plots": [_bounded_plot(plot) for plot in report.plots[:MAX_PLOTS]],
            "output": cut(report.output, MAX_OUTPUT_CHARS),
        }
    )


@dataclass(frozen=True)
class ShownResult:
    """What of a stored submission a page or an API answer shows, each part bounded."""

    feedback: str | None
    checks: list[Check]
    plots: list[PlotSeries]
    output: str
    notices: list[str]


def _stored(model: type[Check] | type[PlotSeries], value: Any, submission_id: str) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError:
        log.warning("submission %s: a stored %s is malformed, not shown", submission_id, model)
        return None


def _stored_plot(value: Any, submission_id: str) -> PlotSeries | None:
    if isinstance(value, dict):
        # Cut before validating: validating two million stored floats alone takes seconds.
        value = {
            **value,
            **{
                key: value[key][:MAX_SERIES_POINTS]
                for key in ("learner", "reference", "steps", "fixed")
                if isinstance(value.get(key), list)
            },
        }
    plot = _stored(PlotSeries, value, submission_id)
    return None if plot is None else _bounded_plot(plot)


def _rendered_feedback(submission: Submission) -> str:
    """The facts with the words of the diagnosis and the claims, made now
    (`graders.feedback.render`): the facts worded from their sentences when this version can
    word each, else as stored. A result stored before words were rendered when read is shown
    as it was stored. An exercise or a code this version does not know: the facts."""
    facts = submission.feedback or ""
    claims = submission.feedback_claims
    if claims is None or submission.diagnosis is None:
        return facts
    stored = claims if isinstance(claims, list) else []
    keys = [key for key in stored if isinstance(key, str)][:MAX_CLAIMS]
    facts = _worded_facts([said for said in stored if isinstance(said, dict)]) or facts
    try:
        exercise = get_exercise(submission.exercise_id)
        return render(cut_markdown(facts, MAX_FEEDBACK_CHARS), submission.diagnosis, exercise, keys)
    except (UnknownExercise, UnknownDiagnosis):
        return facts


def failure_said(submission: Submission) -> str:
    """What a failed run's result says of the failure, in the grader's words: its feedback's
    facts (`graders.grading.failure_report`); for a result stored before a failure was said
    once, the `runs` check's message, which held it."""
    runs = next((c.get("message") for c in submission.checks or [] if c.get("id") == "runs"), None)
    if isinstance(runs, str) and runs != RUN_FAILED:
        return runs
    return submission.feedback or ""


def shown_result(submission: Submission) -> ShownResult:
    """The stored result, with every part cut to the caps a new result is stored under.

    Notices are capped as the notebook reader makes them (`graders.notebook`).
    """
    checks = [
        _bounded_check(_worded_check(check))
        for value in (submission.checks or [])[:MAX_CHECKS]
        if (check := _stored(Check, value, submission.id)) is not None
    ]
    plots = [
        plot
        for value in (submission.plots or [])[:MAX_PLOTS]
        if (plot := _stored_plot(value, submission.id)) is not None
    ]
    notices = [cut(str(notice), MAX_NOTICE_CHARS) for notice in (submission.upload_notices or [])][
        :MAX_NOTICES
    ]
    return ShownResult(
        feedback=None
        if submission.feedback is None
        else cut_markdown(_rendered_feedback(submission), MAX_FEEDBACK_CHARS),
        checks=checks,
        plots=plots,
        output=cut(submission.output or "", MAX_OUTPUT_CHARS),
        notices=notices,
    )
