"""What each diagnosis means, in the words of the lesson: zero, backward, step.

Feedback and check messages are markdown in the server's voice. Whatever the learner's code
chose (an exception's type and message, a traceback, a line of their code, a type name) goes
into them only through `graders.quoting.learner_text`, which shows it verbatim as code.
"""

from __future__ import annotations

from collections.abc import Sequence

from graders.claims import claim
from graders.diagnoses import declared, registry
from graders.exercise import Exercise
from graders.kinds import kind_of, owner
from graders.sentences import Sentence, words_of

ORDER = "The order is always: **zero, backward, step** — in that order, every iteration."


# What an error from a broken graph means, said beside PyTorch's own message (`error_concept`).
NO_GRAPH_ERROR = "does not require grad and does not have a grad_fn"
SECOND_BACKWARD_ERROR = "backward through the graph a second time"
ERROR_CONCEPTS = {
    NO_GRAPH_ERROR: (
        "What this means: the loss you called `backward()` on does not depend on the model's "
        "parameters. Somewhere between `model(x)` and the loss the graph was cut: a forward "
        "pass under `torch.no_grad()`, `.detach()` or `.data`, `.item()` or a tensor rebuilt "
        "from numbers, or an operation with no gradient such as `argmax`. Compute the loss "
        "from the model's output with differentiable operations. Setting `requires_grad = True` "
        "on the loss would silence this error without reconnecting the graph."
    ),
    SECOND_BACKWARD_ERROR: (
        "What this means: `backward()` ran a second time on a graph the first pass had already "
        "used and freed. PyTorch's advice, `retain_graph=True`, would silence the error but not "
        "fix the loop: the second pass adds the same gradients to `.grad` again, doubling them. "
        "Call `backward()` once per forward pass."
    ),
}


def error_concept(message: str) -> str:
    """The concept behind an error PyTorch raises on a broken graph, or "" for any other.

    Read from the exception's message (the learner's to forge: a forged one only gets these
    words beside their own traceback).
    """
    return next((words for said, words in ERROR_CONCEPTS.items() if said in message), "")


def diagnosis_words(code: str, exercise: Exercise) -> str:
    """What a diagnosis means, in its declared words that are true of this exercise
    (`graders.diagnoses`).

    A code about steps, micro-batches or clipping on an exercise without them, or a code another
    kind owns (only a declared bug could give one), is said as `incorrect` is: nothing false is
    said of the learner's code. Raises UnknownDiagnosis for a code nobody declared.
    """
    kind = kind_of(exercise)
    present = {
        "steps": kind.steps,
        "micro-batches": any(spec.micro_batches for spec in exercise.cases),
        "clipping": any(spec.max_norm is not None for spec in exercise.cases),
    }
    record = declared(code)
    if (record.about and not present[record.about]) or owner(code) not in ("", kind.name):
        record = declared("incorrect")
    text = record.words
    if not kind.steps:
        text = record.said_in.get("without-steps", text)
    if kind.replay is not None and not kind.replay.per_call:
        text = record.said_in.get("whole-loop", text)
    if present["micro-batches"]:
        text = record.said_in.get("micro-batches", text)
    text = record.by_exercise.get(exercise.id, text)
    if record.code == "correct" and exercise.correct:
        text = exercise.correct  # what this exercise asks, in its author's words
    if record.code == "wrong-return-type":
        text += f" Here: `{exercise.signature}`."
    return f"{text} {ORDER}" if kind.steps and record.order else text


# Keys of what a grade says besides its diagnosis, with a diagnosis's code after the colon.
SECOND, OTHER, SEE_CHECK = "second", "other", "check"
SEE_CHECK_WORDS = "The first check that fails is `{check}`."
# Another fit: said with its own note when it has one (graders.diagnosis), else with the
# words of its code.
ANOTHER_FIT = Sentence(
    "diagnosis/another-fit",
    "Another explanation fits your numbers and your calls just as well (`{code}`): {note}",
)
SECOND_MISTAKE = Sentence(
    "diagnosis/second-mistake", "Your code makes a second mistake as well (`{code}`): {note}"
)
SAID_WITH_CODE = {SECOND: SECOND_MISTAKE, OTHER: ANOTHER_FIT}


def render(facts: str, diagnosis: str, exercise: Exercise, keys: Sequence[str] = ()) -> str:
    """A grade's feedback from what it stores: its facts, then the words of its diagnosis, of
    a second mistake or another fit (`second:CODE`, `other:CODE`) and of each claim that held
    (`graders.claims`); a key this version does not know is left out. Made when the grade is
    read, so rewording a diagnosis changes no stored grade."""
    parts = [facts, diagnosis_words(diagnosis, exercise)]
    for key in keys:
        kind, _, code = key.partition(":")
        said = claim(key)
        if said is not None:
            parts.append(said.words)
        elif kind == SEE_CHECK and code:
            parts.append(SEE_CHECK_WORDS.format(check=code))
        elif kind in SAID_WITH_CODE and code in registry():
            said_with = SAID_WITH_CODE[kind](code=code, note=diagnosis_words(code, exercise))
            parts.append(words_of(said_with))
    return "\n\n".join(part for part in parts if part)
