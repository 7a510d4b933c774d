"""What an exercise kind is: everything the grader needs to record, parse, judge and explain one.

A kind is declared once, as an `ExerciseKind` in its own module under `graders/kinds`, and
registered in `graders.kinds.KINDS`, which refuses at import a declaration with a piece missing.
An exercise names its kind in `exercise.toml`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graders.diagnoses import Declared
from graders.harness import Recorder
from graders.judging import KindJudge
from graders.trace import TraceShape

if TYPE_CHECKING:
    from graders.exercise import CaseSpec, Exercise
    from graders.explanation import Explanation, Traces
    from graders.replay import Replay

# What a kind's diagnosis models make of the learner's traces: every explanation that fits.
Models = Callable[["ExerciseKind", "Exercise", "Traces"], list["Explanation"]]


@dataclass(frozen=True)
class ExerciseKind:
    """One exercise kind: what it records, how its trace is bounded, how it is judged and told.

    `record` runs in the sandbox on the learner's function and here on the trusted ones (the
    reference, the known bugs, the replayed models); its source, and the sources of
    `sandbox_helpers`, are shipped into the sandbox after graders/harness.py, so they may use
    only what that file defines, each other, and builtins. `replay` is how the learner's
    recorded calls are replayed as a loop, for the kinds that train with an optimizer (None for
    kinds that only read). `micro_batches`: its cases may hand the function micro-batches.
    `case_settings`: the case settings of `graders.exercise.KIND_SETTINGS` this kind reads; a
    case setting another is refused when the exercise loads, not silently ignored.
    `case_problem`: what in a case this kind cannot judge though it reads every setting (a
    declared model it cannot observe), said as the field and what to do; None when it can.
    `diagnoses`: the declarations (`graders.diagnoses`) of the codes only this kind's models give,
    whose words speak of what it judges (a scheduler, a checkpoint): on an exercise of another
    kind they are said as `incorrect` is.
    """

    name: str
    summary: str
    record: Recorder
    trace: TraceShape
    judge: KindJudge
    models: Models
    replay: Replay | None = None
    sandbox_helpers: tuple[Callable[..., Any], ...] = ()
    case_settings: frozenset[str] = frozenset()
    case_problem: Callable[[CaseSpec], str | None] | None = None
    diagnoses: tuple[Declared, ...] = ()

    @property
    def steps(self) -> bool:
        """Does the learner's function train with the optimizer?"""
        return self.replay is not None
