"""A submission graded against a served exercise, named by its id: the package's entry
(`graders.grade`). Above the exercises served, which are proven by grading them.
"""

from __future__ import annotations

from graders.exercise import for_learner
from graders.exercises import get_exercise
from graders.grading import Graded, grade_exercise
from graders.report import GradeReport
from sandbox import Limits, Runner


def grade(
    exercise_id: str,
    source: str,
    limits: Limits | None = None,
    runner: Runner | None = None,
    learner_key: str | None = None,
) -> GradeReport:
    """grade_with_release()'s report, for a caller that shows it to nobody else (the CLI)."""
    return grade_with_release(exercise_id, source, limits, runner, learner_key).report


def grade_with_release(
    exercise_id: str,
    source: str,
    limits: Limits | None = None,
    runner: Runner | None = None,
    learner_key: str | None = None,
) -> Graded:
    """Grade one submission of an exercise; learner mistakes are reports, never exceptions.

    `runner` is the server's (opened once at start-up); without one, a cold runner is chosen
    from the environment. `learner_key` names whose cases a per-learner exercise is graded on
    (graders.exercise.for_learner): the same key gives the same cases, a regrade included.
    Raises graders.exercises.UnknownExercise, GraderFault when the exercise or the grader is
    at fault, and sandbox.SandboxUnavailable when this host cannot
    run untrusted code safely (server faults, not the learner's).
    """
    exercise = for_learner(get_exercise(exercise_id), learner_key)
    return grade_exercise(exercise, source, limits, runner)
