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
        "in `.grad`, and your loop does not clear it before `backward()`. So a step used the "
        "sum of this batch's gradient and whatever `.grad` held before it. Call "
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
    "loss-detached": (
        "Your code calls `backward()`, but on a loss cut off from the model: `.detach()`, "
        "`.data`, or `requires_grad = True` set on the loss itself gives a tensor with no path "
        "back to the weights, so `backward()` computes no gradient for them. Setting "
        "`requires_grad` silences PyTorch's error; it does not reconnect the graph. Call "
        "`backward()` on the loss computed from `model(x)`, as `loss_fn` returns it."
    ),
    "grad-none-error": (
        "Your code reached for `.grad` when it was `None`. `.grad` is `None` until a "
        "`backward()` fills it, and again after `zero_grad()`, which since PyTorch 2.0 releases "
        "the gradient tensors rather than filling them with zeros. So either no `backward()` "
        "had filled it yet, or it had been cleared. Read `.grad` after `backward()`, or check "
        "for `None` first (`if p.grad is not None`); to clear into tensors of zeros instead, "
        "`optimizer.zero_grad(set_to_none=False)`."
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
    "optimizer-recreated": (
        "Your code makes an optimizer of its own, again and again, where it should use the "
        "`optimizer` it was given. A new optimizer starts with an empty momentum buffer, so "
        "the momentum that carries over from one step to the next is lost and each update is "
        "a plain SGD step. Use the `optimizer` you were given: it keeps its state between "
        "steps."
    ),
    "gradients-times-loss": (
        "Your gradients are the correct ones multiplied by the loss itself, a factor that "
        "changes every step: what `loss.backward(loss)` computes, since the argument of "
        "`backward()` multiplies every gradient. Call `loss.backward()` with no argument."
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
    "scheduler-per-batch": (
        "Your loop steps the scheduler after every batch, not once per epoch: the learning "
        "rate decays once per batch, so training slows down far sooner than the schedule "
        "says. Call `scheduler.step()` once per epoch, after the epoch's batches."
    ),
    "scheduler-before-optimizer": (
        "Your loop steps the scheduler before the optimizer has stepped (PyTorch warns: "
        '"Detected call of `lr_scheduler.step()` before `optimizer.step()`"): the '
        "schedule's first learning rate is skipped, and training runs ahead of the schedule. "
        "Call `scheduler.step()` at the end of each epoch, after its optimizer steps."
    ),
    "scheduler-never": (
        "Your loop never steps the scheduler, so the learning rate never decays: every epoch "
        "trains at the first one's. Call `scheduler.step()` once at the end of every epoch."
    ),
    "missing-eval": (
        "Your function measured the model in training mode: dropout zeroed activations at "
        "random, so the loss is not the model's. "
        "Call `model.eval()` before the forward pass."
    ),
    "gradients-in-evaluation": (
        "Your function trains while it evaluates: it computed gradients (setting `.grad`) or "
        "changed the weights. Evaluation only measures: a forward pass and the loss, nothing "
        "more."
    ),
    "missing-no-grad": (
        "Your forward pass ran with gradient recording on, so autograd built a graph (and "
        "kept the activations) for a backward pass that never comes. Run it inside "
        "`with torch.no_grad():`."
    ),
    "left-in-eval-mode": (
        "Your function leaves the model in evaluation mode: the training that follows would "
        "run without dropout. Call "
        "`model.train()` before returning."
    ),
    "optimizer-state-lost": (
        "Your checkpoint does not bring back the optimizer's state: after `resume` the "
        "optimizer has no momentum buffers (or other ones), so momentum restarts from zero "
        "and training does not go on as it would have. Save `optimizer.state_dict()` with the "
        "model's and load it with `optimizer.load_state_dict(...)`."
    ),
    "model-not-restored": (
        "After `resume` the model you were given does not hold the saved weights. Load them "
        "into it, `model.load_state_dict(state[...])`, rather than into a new model or a "
        "copy."
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
    "missing-clip": (
        "Your step used gradients that were not clipped: `clip_grad_norm_` was not called, or "
        "it was called before `backward()`, when `.grad` held nothing of this batch to clip. "
        "Clip after `loss.backward()` and before `optimizer.step()`."
    ),
    "clip-after-step": (
        "Your code clips the gradients after `optimizer.step()`: the step had already used "
        "them unclipped, and the clipped ones are never used. Clip after `loss.backward()` and "
        "before `optimizer.step()`."
    ),
    "clip-by-value": (
        "Your code clips each gradient value on its own (`clip_grad_value_`), so the gradient "
        "changes direction and its norm is not `max_norm`. Clip by the norm of all the "
        "gradients together: `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`."
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
        "loss-after-update", "optimizer-recreated", "gradients-times-loss", "loss-detached",
    }
)  # fmt: skip
ABOUT_MICRO_BATCHES: frozenset[Diagnosis] = frozenset(
    {"wrong-loss-scaling", "step-per-microbatch", "zero-grad-inside-accumulation"}
)
# The codes about clipping the gradients: on an exercise whose cases do not clip, no model gives
# them, and a declared bug that did is told in neutral words.
ABOUT_CLIPPING: frozenset[Diagnosis] = frozenset(
    {"missing-clip", "clip-after-step", "clip-by-value"}
)
# The lesson's order closes what is said of a training loop's calls.
WITH_ORDER: frozenset[Diagnosis] = frozenset(
    {
        "correct", "incorrect", "missing-zero-grad", "step-before-backward",
        "zero-grad-before-step", "missing-step", "missing-backward", "loss-detached",
        "backward-twice",
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


# Said on an exercise whose function runs the whole loop: it is called once, so "every call"
# would be false where every batch is meant.
WHOLE_LOOP_WORDS: dict[Diagnosis, str] = {
    "step-skipped": (
        "On some batches your loop never reached `optimizer.step()`: their gradients were "
        "computed and no step applied them. Step once for every batch."
    ),
    "zero-grad-skipped": (
        "Your loop clears the gradients on some batches but not on others. PyTorch adds each "
        "new gradient to whatever is already in `.grad`, so after a batch that did not clear, "
        "the step used the sum of the last few batches' gradients. Call "
        "`optimizer.zero_grad()` for every batch, before `backward()`."
    ),
}
# Said on an exercise of micro-batches, where one step follows several backward() calls.
MICRO_BATCH_WORDS: dict[Diagnosis, str] = {
    "step-twice": (
        "Your function calls `optimizer.step()` more than once per call: every extra step "
        "applies the same gradients again, so the weights move too far. Step once, after the "
        "last micro-batch's `backward()`."
    ),
    "zero-grad-before-step": (
        "Your function clears the gradients between the micro-batches' `backward()` and "
        "`step()`, so the optimizer steps on empty gradients and the weights never move. Clear "
        "them once, before the first micro-batch's `backward()`."
    ),
}
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


def explanation(code: Diagnosis, exercise: Exercise) -> str:
    """What a diagnosis means, in words that are true of this exercise.

    A code about steps or micro-batches on an exercise without them (only a declared bug could
    give one) is said as `incorrect` is: nothing false is said of the learner's code.
    """
    # Imported here: the kinds' modules use this one's learner_text.
    from graders.kinds import KINDS, kind_of

    # Exercises of kinds that take no step (prove-accumulation forbids one), or without
    # micro-batches: no word about a step, or about micro-batches, is true of them.
    steps = kind_of(exercise).steps
    micro_batches = any(spec.micro_batches for spec in exercise.cases)
    clipping = any(spec.max_norm is not None for spec in exercise.cases)
    if (
        (code in ABOUT_STEPS and not steps)
        or (code in ABOUT_MICRO_BATCHES and not micro_batches)
        or (code in ABOUT_CLIPPING and not clipping)
    ):
        code = "incorrect"
    # A code another kind owns speaks of what that kind judges (a scheduler, a checkpoint).
    if any(code in k.diagnoses for k in KINDS.values() if k is not kind_of(exercise)):
        code = "incorrect"
    text = EXPLANATIONS[code] if steps else WITHOUT_STEPS.get(code, EXPLANATIONS[code])
    if code == "correct" and exercise.correct:
        text = exercise.correct  # what this exercise asks, in its author's words
    replay = kind_of(exercise).replay
    if replay is not None and not replay.per_call:
        text = WHOLE_LOOP_WORDS.get(code, text)
    if micro_batches:
        text = MICRO_BATCH_WORDS.get(code, text)
    if code == "wrong-return-type":
        text += f" Here: `{exercise.signature}`."
    return f"{text} {ORDER}" if steps and code in WITH_ORDER else text
