"""What each diagnosis means, in the words of the lesson: zero, backward, step.

Feedback and check messages are markdown in the server's voice. Whatever the learner's code
chose (an exception's type and message, a traceback, a line of their code, a type name) goes
into them only through `learner_text`, which shows it verbatim as code.
"""

from __future__ import annotations

import re
import unicodedata

from graders.exercises import Exercise
from graders.report import Diagnosis

# Bidirectional overrides and isolates reorder what is shown around them; other invisible
# format characters hide text. Neither belongs in quoted code.
_INVISIBLE = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def learner_text(text: str, *, block: bool = False) -> str:
    """Learner-controlled text as markdown that shows it verbatim, never interpreted.

    Inline, a code span; with `block`, a fenced code block (for a traceback or a line of code).
    The fence is longer than any run of backticks in the text, so nothing inside can close it,
    and markdown renderers escape HTML inside code. Control and bidi characters are replaced
    by U+FFFD so that what is shown is what is there.
    """
    cleaned = "".join(
        "\ufffd"
        if ch in _INVISIBLE or (unicodedata.category(ch) == "Cc" and ch not in "\n\t")
        else ch
        for ch in text
    )
    longest = max((len(run) for run in re.findall(r"`+", cleaned)), default=0)
    if block:
        fence = "`" * max(3, longest + 1)
        # On lines of its own wherever it is placed: a fence may interrupt a paragraph.
        return f"\n{fence}text\n{cleaned.rstrip(chr(10))}\n{fence}\n"
    fence = "`" * (longest + 1)
    flat = " ".join(cleaned.split("\n"))
    # A span that starts or ends with a backtick or a space (or is blank) is padded with a
    # space at each end, which the renderer strips again.
    padded = f" {flat} " if not flat.strip(" ") or flat[0] in " `" or flat[-1] in " `" else flat
    return f"{fence}{padded}{fence}"


ORDER = "The order is always: **zero, backward, step** — in that order, every iteration."

EXPLANATIONS: dict[Diagnosis, str] = {
    "correct": (
        "Your loop clears the old gradients, computes this batch's with `backward()`, then "
        "steps. Every update matched the reference."
    ),
    "missing-zero-grad": (
        "Your gradients **accumulate**: PyTorch adds each new gradient to whatever is already "
        "in `.grad`, and your loop does not clear it before `backward()`. So each step used the "
        "sum of this batch's gradient and everything left over before it. Call "
        "`optimizer.zero_grad()` at the start of the step, before `backward()`."
    ),
    "step-before-backward": (
        "Your optimizer stepped before `backward()`: each update used the gradients that were "
        "lying around — the previous batch's, or none at all — not this batch's. Nothing errors "
        "and the loss curve just looks noisy. Clear the gradients, call `loss.backward()`, and "
        "only then `optimizer.step()`."
    ),
    "zero-grad-before-step": (
        "Your loop clears the gradients between `backward()` and `step()`, so the optimizer "
        "steps on empty gradients and the weights never move. Clear them at the start of the "
        "step, before `backward()`."
    ),
    "missing-step": (
        "Your loop computes gradients but never calls `optimizer.step()`, so the weights never "
        "change."
    ),
    "missing-backward": (
        "Your loop never calls `loss.backward()`, so there are no gradients for the optimizer "
        "to use and the weights never change."
    ),
    "grad-none-error": (
        "Your code reached for `.grad` when it was `None`. Since PyTorch 2.0, `zero_grad()` "
        "releases the gradient tensors rather than filling them with zeros, so `.grad` is "
        "`None` until the next `backward()`. Two fixes: check for `None` before using it "
        "(`if p.grad is not None`), or clear with `optimizer.zero_grad(set_to_none=False)` "
        "to keep tensors of zeros."
    ),
    "wrong-loss-scaling": (
        "Your micro-batch losses are not divided by how many there are. Gradients add up "
        "in `.grad`, so the sum of N micro-batch gradients is N times the whole batch's and "
        "every step is N times too large. Divide each micro-batch's loss by "
        "`len(micro_batches)` before `backward()`."
    ),
    "step-per-microbatch": (
        "Your loop steps once per micro-batch. Accumulation means the opposite: run "
        "`backward()` on every micro-batch, letting the gradients add up in `.grad`, then "
        "step **once**, so the update equals one step on the whole batch."
    ),
    "zero-grad-inside-accumulation": (
        "Your loop clears the gradients inside the micro-batch loop, so each micro-batch wipes "
        "out the ones before it and only the last one counts in the update. Clear once, before "
        "the first micro-batch."
    ),
    "backward-twice": (
        "Your gradients are a whole multiple of the correct ones: `backward()` ran more than "
        "once before the step. PyTorch adds each new gradient to whatever is already in "
        "`.grad`, so two backward passes give the sum of both. Call `loss.backward()` once per "
        "step."
    ),
    "step-twice": (
        "Your loop calls `optimizer.step()` more than once per iteration: every extra step "
        "applies the same gradients again, so the weights move too far. Step once, after "
        "`backward()`."
    ),
    "step-skipped": (
        "On some calls your loop never reached `optimizer.step()`: those calls computed "
        "gradients that no step applied. Step on every call."
    ),
    "zero-grad-skipped": (
        "Your loop clears the gradients on some calls but not on others. PyTorch adds each new "
        "gradient to whatever is already in `.grad`, so after a call that did not clear, the "
        "step used the sum of the last few calls' gradients. Call `optimizer.zero_grad()` on "
        "every call, before `backward()`."
    ),
    "gradients-scaled": (
        "Your gradients are a constant multiple of the correct ones: the loss, or the gradient, "
        "was scaled before the step. Call `backward()` on the loss the `loss_fn` you were given "
        "computes, as it is."
    ),
    "loss-sum-not-mean": (
        "Your gradients are the batch's number of values times the correct ones: the loss was "
        "summed over the batch, not averaged. `nn.MSELoss()` averages; use the `loss_fn` you "
        "were given."
    ),
    "wrong-learning-rate": (
        "Your updates point the right way but have the wrong size: they do not use the "
        "optimizer's learning rate. Let `optimizer.step()` make the update with the optimizer's "
        "own settings."
    ),
    "wrong-momentum": (
        "Your updates do not use the optimizer's momentum: an update written by hand, "
        "`p -= lr * p.grad`, is plain SGD, and a momentum set by hand is not the optimizer's. "
        "Let `optimizer.step()` make the update: it keeps the optimizer's momentum."
    ),
    "loss-after-update": (
        "Your weights are right, but the loss you return was computed after the update, at the "
        "new weights. Return the loss of the forward pass that `backward()` used, before "
        "`optimizer.step()`: `loss.item()`."
    ),
    "returns-live-gradient": (
        "You returned `.grad` itself, not a copy. `.grad` is one tensor that PyTorch keeps "
        "updating: the second `backward()` added to the very tensor you kept as the first. "
        "Clone it (`.grad.clone()`) to keep its value at that moment."
    ),
    "cleared-between-passes": (
        "You cleared the gradients between the two passes, so the second equals the first: "
        "nothing accumulated. The point of this exercise is to run backward twice *without* "
        "clearing: PyTorch adds each new gradient to whatever is already in `.grad`."
    ),
    "wrong-number-of-passes": (
        "Your copies were not taken after one and after two backward passes. Run `backward()` "
        "once and copy `.grad`, then run it a second time, without clearing, and copy again: "
        "PyTorch adds each new gradient to whatever is already in `.grad`, so the second copy "
        "is the sum of both passes."
    ),
    "missing-abs": (
        "You summed the gradients themselves, not their absolute values: positive and negative "
        "entries cancel out. Use `.abs().sum()`."
    ),
    "modifies-gradients": (
        "Your function changes the gradients it measures. A function that reads `.grad` must "
        "leave it as it was: the code that runs after it still needs it."
    ),
    "syntax-error": "Python could not read your code. Fix the line named above and submit again.",
    "missing-function": "The function the exercise asks for is not defined in your code.",
    "wrong-return-type": (
        "Your values are right, but your function returns the wrong type of value: return what "
        "the exercise's signature says."
    ),
    "runtime-error": "Your code raised an exception, so what it does could not be checked.",
    "timeout": (
        "Your code ran out of time. What this exercise asks takes milliseconds on a tiny "
        "`nn.Linear`: look for a loop that never ends or a call that waits."
    ),
    "memory-limit": (
        "Your code used more memory than it may. What this exercise asks needs almost none on "
        "a tiny `nn.Linear`: look for a tensor or list that grows without bound."
    ),
    "output-limit": (
        "Your code printed more than the output limit allows. Print less, or nothing: the "
        "grader does not read printed output."
    ),
    "non-finite-value": (
        "Your code produced a value that is not a finite number: NaN, an infinity, or one far "
        "larger than these small problems ever give. Look for a division by zero, a log of "
        "zero or of a negative number, or a value that is added to itself instead of replaced."
    ),
    "not-started": (
        "Nothing of the exercise is done yet, so nothing is scored. Make the changes the "
        "exercise asks for and submit again."
    ),
    "incorrect": (
        "Your results differ from the reference's, and not in the way of any mistake we know. "
        "Read the checks above: they say what went wrong first."
    ),
}


# The codes whose words are about an optimizer's step, or about micro-batches: on an exercise of
# another kind no model gives them, and a declared bug that did is told in neutral words.
ABOUT_STEPS: frozenset[Diagnosis] = frozenset(
    {
        "missing-zero-grad", "step-before-backward", "zero-grad-before-step", "missing-step",
        "missing-backward", "backward-twice", "step-twice", "step-skipped", "zero-grad-skipped",
        "gradients-scaled", "loss-sum-not-mean", "wrong-learning-rate", "wrong-momentum",
        "loss-after-update",
    }
)  # fmt: skip
ABOUT_MICRO_BATCHES: frozenset[Diagnosis] = frozenset(
    {"wrong-loss-scaling", "step-per-microbatch", "zero-grad-inside-accumulation"}
)
# The lesson's order closes what is said of a training loop's calls.
WITH_ORDER: frozenset[Diagnosis] = frozenset(
    {
        "correct", "incorrect", "missing-zero-grad", "step-before-backward",
        "zero-grad-before-step", "missing-step", "missing-backward", "backward-twice",
        "step-twice", "step-skipped", "zero-grad-skipped",
    }
)  # fmt: skip
# Said on an exercise that takes no step, where the stepping words would be false.
WITHOUT_STEPS: dict[Diagnosis, str] = {
    "correct": "Every check passed in every case: your function does exactly what was asked.",
    "grad-none-error": (
        "Your code reached for `.grad` when it was `None`. A gradient is `None` until a "
        "backward pass fills it, and again once it is released (since PyTorch 2.0, clearing "
        "releases it). Check for `None` before using it: `if p.grad is not None`."
    ),
}


def explanation(code: Diagnosis, exercise: Exercise) -> str:
    """What a diagnosis means, in words that are true of this exercise.

    A code about steps or micro-batches on an exercise without them (only a declared bug could
    give one) is said as `incorrect` is: nothing false is said of the learner's code.
    """
    # Imported here: the kinds' modules use this one's learner_text.
    from graders.kinds import kind_of

    # Exercises of kinds that take no step (prove-accumulation forbids one), or without
    # micro-batches: no word about a step, or about micro-batches, is true of them.
    steps = kind_of(exercise).steps
    micro_batches = any(spec.micro_batches for spec in exercise.cases)
    if (code in ABOUT_STEPS and not steps) or (code in ABOUT_MICRO_BATCHES and not micro_batches):
        code = "incorrect"
    text = EXPLANATIONS[code] if steps else WITHOUT_STEPS.get(code, EXPLANATIONS[code])
    if code == "correct" and exercise.correct:
        text = exercise.correct  # what this exercise asks, in its author's words
    if code == "wrong-return-type":
        text += f" Here: `{exercise.signature}`."
    return f"{text} {ORDER}" if steps and code in WITH_ORDER else text
