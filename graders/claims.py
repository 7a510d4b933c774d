"""Sentences that name a cause or praise a call: each a claim with a predicate over recorded facts.

A `Claim` is words and the predicate that must hold of what the grader recorded for the
learner's code (the calls one call of their function made: `zero_grad`, `backward`, `step`, in
order) before the words are said. Every claim is registered here, so the proof
(`graders.proving.false_claims`, run by check-exercises and the tests) finds each one in what a
program is told and checks its predicate against that program's own recorded calls.

A claim about values (the learner's update equals a step on the unclipped gradient, say) is
decided where the values are, in the kind's judging, from numbers the grader computes itself;
its words say the values, not a cause.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graders.sentences import Said, Sentence

Calls = Sequence[str]


@dataclass(frozen=True, eq=False)
class Claim:
    """`words`, said only when `holds` is true of the calls one call of the function made.

    `words` is the claim's fixed text (a sentence may go on after it with numbers); the proof
    finds a claim in a text by it. A claim about one call must hold of some call of a visible
    case; one about `every` call, of each.
    """

    key: str
    words: str
    holds: Callable[[Calls], bool]
    every: bool = False  # said of every call: the predicate must hold of each

    def __post_init__(self) -> None:
        if any(other.key == self.key for other in CLAIMS):
            raise ValueError(f"two claims are keyed {self.key!r}")
        CLAIMS.append(self)
        Sentence(f"claims/{self.key}", self.words)  # said within a check's sentence too

    def said_of(self, calls: Calls) -> str:
        """The words when they are true of these calls, else ""."""
        return self.words if self.holds(calls) else ""

    def said_in_check(self, calls: Calls) -> Said | None:
        """The claim as part of a check's sentence (graders.sentences) when it is true of these
        calls, else None."""
        return Said(key=f"claims/{self.key}") if self.holds(calls) else None


CLAIMS: list[Claim] = []


def claim(key: str) -> Claim | None:
    """The claim stored as `key` in a grade (GradeReport.claims), None for one this version
    does not know."""
    return next((c for c in CLAIMS if c.key == key), None)


def ran(calls: Calls, call: str) -> bool:
    return call in calls


def cleared_before_backward(calls: Calls) -> bool:
    """`zero_grad()` ran before the first `backward()` of the call."""
    return "backward" in calls and "zero_grad" in calls[: list(calls).index("backward")]


def cleared_after_backward(calls: Calls) -> bool:
    """`zero_grad()` ran after the last `backward()` of the call (releasing its gradient)."""
    backwards = [i for i, call in enumerate(calls) if call == "backward"]
    return bool(backwards) and "zero_grad" in calls[backwards[-1] + 1 :]


def textbook_order(calls: Calls) -> bool:
    """zero_grad, then backward, then step, once each, and nothing else of the three."""
    return [c for c in calls if c in ("zero_grad", "backward", "step")] == [
        "zero_grad",
        "backward",
        "step",
    ]


def said_calls(calls: Calls) -> str:
    """The recorded calls of one call, in the learner's words."""
    named = [f"`{c}()`" for c in calls if c in ("zero_grad", "backward", "step")]
    return ", ".join(named) if named else "none of `zero_grad()`, `backward()`, `step()`"


# What a check message of a stepping kind may say of one call's calls.
RELEASED_AFTER_BACKWARD = Claim(
    "released-after-backward",
    "`zero_grad()` ran after this call's `backward()` and released it.",
    cleared_after_backward,
)
NO_BACKWARD = Claim(
    "no-backward", "No `backward()` was recorded in this call.", lambda c: not ran(c, "backward")
)
NO_STEP = Claim(
    "no-step", "No `optimizer.step()` was recorded in this call.", lambda c: not ran(c, "step")
)
ACCUMULATED = Claim(
    "accumulated",
    "Nothing cleared `.grad` before this call's `backward()`, so the gradients added up.",
    lambda c: ran(c, "backward") and not cleared_before_backward(c),
)
# Praise of the calls, said with `correct` on the kinds that step.
TEXTBOOK_ORDER = Claim(
    "textbook-order",
    "In every call your code cleared the gradients with `zero_grad()`, ran `backward()`, then "
    "`step()`: the lesson's order.",
    textbook_order,
    every=True,
)
