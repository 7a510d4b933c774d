"""check-exercises: prove that every exercise can tell right from each of its known bugs.

Trusted code only (the reference, the starter, the declared bugs), so it runs in this process,
without a sandbox, through the very judging that grades learners.
"""

from __future__ import annotations

import json

from graders import harness
from graders.exercises import Exercise
from graders.grading import failure_report, judge, trace_failure, trusted_trajectories
from graders.judging import same_trace
from graders.kinds import JUDGES
from graders.report import GradeReport
from graders.trace import CaseTrace, parse_trace


def judge_source(exercise: Exercise, source: str) -> GradeReport:
    """Grade trusted source in this process: the same trace, parsing and judging as grade()."""
    specs = [spec.harness_spec() for spec in exercise.cases]
    document = harness.run_submission(source, exercise.kind, exercise.entry_point, specs)
    trace = parse_trace(json.dumps(document).encode(), exercise.kind, list(exercise.cases))
    traces: dict[str, CaseTrace] = {}
    failure = trace_failure(exercise, trace, list(exercise.cases), traces)
    if failure is not None:
        return failure_report(exercise, failure)
    return judge(exercise, traces)


def prove(exercise: Exercise) -> list[str]:
    """Every way the exercise is unsound, each said with what shows it; empty when sound."""
    known = JUDGES[exercise.kind].checks
    unknown = sorted(set(exercise.checks) - set(known))
    if unknown:
        return [
            f"{exercise.id}: checks {unknown} are not checks of kind {exercise.kind} "
            f"(it has {sorted(known)})"
        ]
    problems = []
    reference = judge_source(exercise, exercise.solution_code)
    if reference.score != exercise.max_score or reference.diagnosis != "correct":
        failing = next((c.message for c in reference.checks if not c.passed), "")
        problems.append(
            f"{exercise.id}: the reference solution scores {reference.score:g}/"
            f"{exercise.max_score:g} ({reference.diagnosis}): {failing}"
        )
    starter = judge_source(exercise, exercise.starter_code)
    if starter.score >= exercise.max_score:
        problems.append(f"{exercise.id}: the starter code scores full marks unchanged")
    trusted = trusted_trajectories(exercise)
    for variant in exercise.variants:
        report = judge_source(exercise, variant.source)
        differing = [
            spec.id
            for spec in exercise.cases
            if not same_trace(trusted[variant.id][spec.id], trusted["reference"][spec.id])
        ]
        if not differing:
            problems.append(
                f"{exercise.id}: the reference solution behaves exactly like known bug "
                f"{variant.id} in every case"
            )
            continue
        shown_by = f"it differs from the reference in: {', '.join(differing) or 'no case'}"
        if report.score >= exercise.max_score:
            problems.append(
                f"{exercise.id}: known bug {variant.id} scores full marks: no case makes it "
                "fail a check"
            )
        elif report.diagnosis != variant.diagnosis:
            problems.append(
                f"{exercise.id}: known bug {variant.id} is diagnosed {report.diagnosis}, "
                f"not {variant.diagnosis} ({shown_by})"
            )
    return problems
