"""What an explanation of a learner's trajectory is, and when one agrees with what was recorded.

An explanation (a known buggy loop, or a model fitted in `graders.fitting` or
`graders.diagnosis`) reproduces the learner's recorded values within the judging tolerance
(`same_numbers`) and does not contradict their recorded order of calls (`agrees`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graders.diagnoses import declared
from graders.judging import same_value
from graders.report import Diagnosis
from graders.sentences import Said
from graders.trace import CaseTrace

Traces = dict[str, CaseTrace]
# Fields holding what the learner's function returned: a model explains the updates, and the
# returned value when it is a number; the type of what was returned is the checks' business.
TYPE_FIELDS = frozenset({"loss_type", "losses_type", "result_type", "value_type", "state_type"})
RETURN_FIELDS = frozenset(
    {"loss", "losses", "first", "second", "first_after_clearing", "second_after_clearing", "value"}
)


@dataclass(frozen=True)
class Explanation:
    """The mistakes one model of the learner's code makes, the main one first, and its note.

    `model` names the model (a known bug's id, a fitted family): what lets the note of a fit on
    the visible cases alone stand for the same model fitted on every case.
    """

    codes: tuple[Diagnosis, ...]
    model: str
    note: Said | None = None  # a fact it shows, said when the grade is read

    def __post_init__(self) -> None:
        for code in self.codes:
            declared(code)  # a code nobody declared fails here, where the model names it


def agrees(recorded: Sequence[str], model: Sequence[str]) -> bool:
    """Does a recorded order of calls agree with a model's?

    The backward and step calls must be the same, in the same order; a recorded zero_grad must
    fall where the model clears too. The model may clear where nothing was recorded: a loop can
    clear by hand (`p.grad = None`), which no call shows.
    """

    def skeleton(calls: Sequence[str]) -> tuple[list[str], set[int]]:
        others: list[str] = []
        clears: set[int] = set()
        for call in calls:
            if call == "zero_grad":
                clears.add(len(others))
            else:
                others.append(call)
        return others, clears

    (recorded_calls, recorded_clears), (model_calls, model_clears) = map(
        skeleton, (recorded, model)
    )
    return recorded_calls == model_calls and recorded_clears <= model_clears


def same_numbers(a: CaseTrace, b: CaseTrace, ignored: frozenset[str] = TYPE_FIELDS) -> bool:
    """Do two runs of a case agree on every recorded number, some fields and the calls aside?"""

    def same(r: dict[str, Any] | None, s: dict[str, Any] | None) -> bool:
        if r is None or s is None:
            return r is s
        names = set(r) - ignored - {"calls"}
        return names == set(s) - ignored - {"calls"} and all(
            same_value(name, r[name], s[name]) for name in names
        )

    return (
        len(a.records) == len(b.records)
        and all(same(r, s) for r, s in zip(a.records, b.records, strict=True))
        and same(a.final, b.final)
    )
