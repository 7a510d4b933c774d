"""Naming the mistake: the explanations of a wrong trajectory that its numbers and calls agree on.

An explanation is a known buggy loop of the exercise (its `exercise.toml` variants, run here) or a
small model fitted here to the learner's recorded weights, gradients, losses and calls
(`graders.fitting` for the kinds that step; each kind's module declares its own). It is given
only when it reproduces the learner's recorded values within the judging tolerance *and* the
learner's recorded order of calls agrees with it. When explanations with different names fit,
all of them are said; when none fits, the diagnosis is `incorrect` and the checks say what first
went wrong. Never the nearest name.

The call order comes from the sandbox and could be forged: it only ever rules explanations out.
The score is fixed by the checks before any of this runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graders.diagnoses import Declared, Hint
from graders.exercise import Exercise
from graders.explanation import (
    RETURN_FIELDS,
    TYPE_FIELDS,
    Explanation,
    Traces,
    agrees,
    same_numbers,
)
from graders.feedback import ANOTHER_FIT, OTHER, SECOND
from graders.judging import (
    call_stream,
    same_trace,
)
from graders.kinds import kind_of
from graders.report import Check, Diagnosis
from graders.sentences import Said, Sentence
from graders.trace import MARKS, CaseTrace

# A known bug's note is its exercise's own words (data, part of the exercise's version); what
# is said of another fit that has a note is graders.feedback's ANOTHER_FIT.
VARIANT_NOTE = Sentence("diagnosis/variant-note", "{note}")


@dataclass(frozen=True)
class Verdict:
    """The diagnosis, the facts for the learner, and other diagnoses that fit as well."""

    diagnosis: Diagnosis
    facts: tuple[Said, ...] = ()  # said when the grade is read (graders.sentences)
    also: tuple[Diagnosis, ...] = ()
    said: tuple[str, ...] = ()  # "second:CODE", "other:CODE": rendered from their codes


def diagnose(
    exercise: Exercise,
    traces: Traces,
    trusted: dict[str, Traces],
    checks: Sequence[Check],
) -> Verdict:
    """Name the learner's mistake from every explanation that fits their numbers and calls.

    Which explanations fit is decided on every case. What they say (a note, with the number a
    model was fitted to) comes from fitting again on the visible cases alone, which never sees
    a hidden trace: a hidden case tells whether an explanation fits it, and nothing else.
    """
    if all(c.passed for c in checks):
        return Verdict("correct")
    fitting = explanations(exercise, traces, trusted)
    visible = visible_part(exercise)
    said: list[Explanation] = []
    if visible == exercise:
        said = fitting
    elif visible is not None and any(e.note is not None for e in fitting):
        ids = [spec.id for spec in visible.cases]
        said = explanations(
            visible,
            {id_: traces[id_] for id_ in ids},
            {name: {id_: runs[id_] for id_ in ids} for name, runs in trusted.items()},
        )
    return verdict(exercise, fitting, said)


def explanations(
    exercise: Exercise, traces: Traces, trusted: dict[str, Traces]
) -> list[Explanation]:
    """Every explanation that fits the learner's numbers and calls in all of `exercise`'s cases.

    The harness's marks (`graders.trace.MARKS`) are no calls of a loop the models know: they
    are fitted to the other calls, and the marks then say what a model's words would get wrong.
    A model with no backward() where backward() ran on a loss cut off from the model
    (`detached_backward`) is `loss-detached`, not `missing-backward`; a model without the
    optimizer's momentum where the code made optimizers of its own (`new_optimizer`) is
    `optimizer-recreated`, not an update by hand.
    """
    marks = {call for trace in traces.values() for call in call_stream(trace)} & set(MARKS)
    if marks:
        traces = {id_: _without_marks(trace) for id_, trace in traces.items()}
    found = known_bugs(exercise, traces, trusted)
    kind = kind_of(exercise)
    found += kind.models(kind, exercise, traces)
    if not found and _right_but_returns_wrong_type(exercise, traces, trusted["reference"]):
        found.append(Explanation(("wrong-return-type",), "return-type"))
    for mark, said, meant in MARKED:
        if mark in marks:
            found = [_said_as(fit, said, meant) for fit in found]
    return found


# What a model says, and what it means when the harness recorded a mark.
MARKED: tuple[tuple[str, Diagnosis, Diagnosis], ...] = (
    ("detached_backward", "missing-backward", "loss-detached"),
    ("new_optimizer", "wrong-momentum", "optimizer-recreated"),
    ("new_optimizer", "optimizer-state-reset", "optimizer-recreated"),
)


def _without_marks(trace: CaseTrace) -> CaseTrace:
    def plain(record: dict[str, Any] | None) -> dict[str, Any] | None:
        if record is None or "calls" not in record:
            return record
        return {**record, "calls": [c for c in record["calls"] if c not in MARKS]}

    return trace.model_copy(
        update={"records": [plain(r) for r in trace.records], "final": plain(trace.final)}
    )


def _said_as(fit: Explanation, said: Diagnosis, meant: Diagnosis) -> Explanation:
    """An explanation with `said` named as what the marks show it was (its note, about `said`,
    is not told)."""
    if said not in fit.codes:
        return fit
    codes = tuple(dict.fromkeys(meant if code == said else code for code in fit.codes))
    return Explanation(codes, fit.model, None if fit.codes[0] == said else fit.note)


def visible_part(exercise: Exercise) -> Exercise | None:
    """The exercise with its visible cases only (None when it has none)."""
    cases = [spec for spec in exercise.cases if not spec.hidden]
    if not cases:
        return None
    if len(cases) == len(exercise.cases):
        return exercise
    return exercise.model_copy(update={"cases": cases, "version": exercise.version + "+visible"})


def known_bugs(exercise: Exercise, traces: Traces, trusted: dict[str, Traces]) -> list[Explanation]:
    """The declared buggy loops whose every value and call order the learner's agree with."""
    return [
        Explanation(
            (variant.diagnosis,),
            f"variant:{variant.id}",
            VARIANT_NOTE(note=variant.note) if variant.note else None,
        )
        for variant in exercise.variants
        if all(trusted[variant.id][spec.id].error is None for spec in exercise.cases)
        and all(
            same_trace(traces[spec.id], trusted[variant.id][spec.id])
            and agrees(call_stream(traces[spec.id]), call_stream(trusted[variant.id][spec.id]))
            for spec in exercise.cases
        )
    ]


def _right_but_returns_wrong_type(exercise: Exercise, traces: Traces, reference: Traces) -> bool:
    type_field, wanted = kind_of(exercise).judge.return_type
    returned = {
        record[type_field]
        for trace in traces.values()
        for record in [*trace.records, trace.final]
        if record is not None and type_field in record
    }
    return bool(returned - set(wanted)) and all(
        same_numbers(traces[spec.id], reference[spec.id], TYPE_FIELDS | RETURN_FIELDS)
        for spec in exercise.cases
    )


def verdict(
    exercise: Exercise, explanations: Sequence[Explanation], said: Sequence[Explanation]
) -> Verdict:
    """One diagnosis from the explanations that fit: the first, and the others said too.

    Notes are taken from `said` (the visible cases' fit), for the same model naming the same
    main mistake; an explanation that has none there is told in the words of its code alone.
    """
    notes: dict[tuple[Diagnosis, str], Said | None] = {}
    for fit in said:
        notes.setdefault((fit.codes[0], fit.model), fit.note)

    def note(fit: Explanation) -> Said | None:
        return notes.get((fit.codes[0], fit.model))

    by_code: dict[Diagnosis, Explanation] = {}
    for fit in explanations:
        first = by_code.setdefault(fit.codes[0], fit)
        if first.codes == fit.codes and note(fit) is not None and note(first) is None:
            by_code[fit.codes[0]] = fit  # the same mistakes, told with what shows them here
    if len(by_code) > 1:
        by_code.pop("incorrect", None)  # a declared look-alike that names nothing
    if not by_code:
        return Verdict("incorrect")
    main, *others = by_code.values()
    facts = [said for said in [note(main)] if said is not None]
    # A second mistake, or another fit told in its code's words, is stored as its code and
    # said when the grade is read (graders.feedback.render); a fit's note is a fact, said so.
    keys = [f"{SECOND}:{code}" for code in main.codes[1:]]
    for other in others:
        other_note = note(other)
        if other_note is not None:
            facts.append(ANOTHER_FIT(code=other.codes[0], note=other_note))
        else:
            keys.append(f"{OTHER}:{other.codes[0]}")
    return Verdict(main.codes[0], tuple(facts), tuple(o.codes[0] for o in others), tuple(keys))


# The diagnoses this module gives (graders.diagnoses).
DECLARED: tuple[Declared, ...] = (
    Declared(
        code="correct",
        name="Correct",
        words=(
            "Every check passed in every case: after every call your weights, gradients and "
            "returned loss equal the reference's."
        ),
        said_in={
            "without-steps": (
                "Every check passed in every case: your function does exactly what was asked."
            ),
        },
    ),
    Declared(
        code="incorrect",
        name="Incorrect",
        words=(
            "Not every check passed, and no mistake we know reproduces your values and calls. "
            "The checks below say what differs, and by how much."
        ),
        hint=Hint(
            where=(
                "Look at the first check that fails: its message says what differs from the "
                "reference."
            ),
            what=(
                "Your code runs but its numbers differ from the reference in a way the grader "
                "cannot name as one known mistake."
            ),
            fix=(
                "Compare your code line by line with the steps in the prompt: each one, in its "
                "order, once per iteration."
            ),
        ),
    ),
    Declared(
        code="wrong-return-type",
        name="Wrong return type",
        words=(
            "Your values are right, but your function returns the wrong type of value: return "
            "what the exercise's signature says."
        ),
        hint=Hint(
            where="Look at the value your function returns.",
            what=(
                "The numbers are right but their type is not what the exercise asks for (the "
                "prompt says which)."
            ),
            fix=(
                "Return the type the prompt names: a Python `float` comes from a one-element "
                "tensor with `.item()`."
            ),
        ),
    ),
)
