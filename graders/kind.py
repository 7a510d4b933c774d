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
    from graders.sentences import Said
    from graders.trace import CaseTrace

# What a kind's diagnosis models make of the learner's traces: every explanation that fits.
Models = Callable[["ExerciseKind", "Exercise", "Traces"], list["Explanation"]]
# A case whose run raised, named from the values recorded before it: the code and what those
# values show; None when they show nothing the kind knows (then it is `runtime-error`).
FailureNamer = Callable[["CaseSpec", "CaseTrace"], "tuple[str, Said] | None"]


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
    `optimizer_settings`: for a kind that builds no optimizer from the case (its learner writes
    one), the optimizer's settings (`graders.optimizers.OptimizerFields`) it reads; any other,
    `optimizer` itself among them, is refused the same way. None: it builds the declared one.
    `failure_named`: names a run that raised in a case from the values recorded before the
    error (a missing `scaler.update()` makes torch refuse the next call); the score is 0 all the
    same, as for every run that raised.
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
    failure_named: FailureNamer | None = None
    case_settings: frozenset[str] = frozenset()
    optimizer_settings: frozenset[str] | None = None
    case_problem: Callable[[CaseSpec], str | None] | None = None
    diagnoses: tuple[Declared, ...] = ()

    @property
    def steps(self) -> bool:
        """Does the learner's function train with the optimizer?"""
        return self.replay is not None
