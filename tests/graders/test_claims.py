"""Every sentence that names a cause or praises a call is a claim, said only when the recorded
facts bear it out; where no cause is known a check says what differs and by how much.

The examples are the classes of false sentence issue 51 found on real mistakes, rewritten here
in our own code and numbers, judged in this process (`judge_source`: the tracing and judging
of grade(), without the sandbox's start).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from graders.claims import (
    ACCUMULATED,
    CLAIMS,
    NO_BACKWARD,
    RELEASED_AFTER_BACKWARD,
    TEXTBOOK_ORDER,
    cleared_after_backward,
    cleared_before_backward,
    said_calls,
    textbook_order,
)
from graders.diagnoses import (
    Declared,
    DiagnosisDeclarationError,
    UnknownDiagnosis,
    _checked,
    declared,
    registry,
)
from graders.exercises import EXERCISES_DIR, ExerciseRefused, get_exercise, load_exercise
from graders.explanation import Explanation
from graders.feedback import diagnosis_words
from graders.hints import hints_for
from graders.judging import constant_factor, said_versus
from graders.kinds.step_function import UPDATE_VERSUS
from graders.proving import false_claims, judge_source, told
from graders.report import GradeReport
from graders.sentences import words_of


def code(source: str) -> str:
    return textwrap.dedent(source).strip() + "\n"


def failing(report: GradeReport) -> dict[str, str]:
    return {check.id: check.message for check in report.checks if not check.passed}


def everything_said(report: GradeReport) -> str:
    return "\n".join([report.feedback, *(check.message for check in report.checks)])


# --- the predicates -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("calls", "before", "after", "textbook"),
    [
        (["zero_grad", "backward", "step"], True, False, True),
        (["backward", "step", "zero_grad"], False, True, False),
        (["backward", "zero_grad", "step"], False, True, False),
        (["zero_grad", "step"], False, False, False),
        (["zero_grad", "backward", "backward", "step"], True, False, False),
        ([], False, False, False),
    ],
)
def test_each_predicate_reads_one_calls_order(
    calls: list[str], before: bool, after: bool, textbook: bool
) -> None:
    assert cleared_before_backward(calls) is before
    assert cleared_after_backward(calls) is after
    assert textbook_order(calls) is textbook


def test_a_claim_is_said_only_where_its_predicate_holds() -> None:
    assert RELEASED_AFTER_BACKWARD.said_of(["backward", "zero_grad", "step"])
    assert not RELEASED_AFTER_BACKWARD.said_of(["zero_grad", "step"])
    assert NO_BACKWARD.said_of(["zero_grad", "step"])
    assert not ACCUMULATED.said_of(["zero_grad", "backward", "step"])
    assert ACCUMULATED.said_of(["backward", "step"])
    assert said_calls(["backward", "zero_grad", "step"]) == (
        "`backward()`, `zero_grad()`, `step()`"
    )
    assert said_calls([]) == "none of `zero_grad()`, `backward()`, `step()`"
    assert len({id(c) for c in CLAIMS}) == len(CLAIMS) >= 5


def test_a_difference_is_said_the_learners_value_first() -> None:
    mine, theirs = torch.tensor([[0.5, -0.229]]), torch.tensor([[0.5, 0.096]])
    assert words_of(said_versus(UPDATE_VERSUS, "weight", mine, theirs)) == (
        "After the call, `weight[0][1]` is -0.229; the reference's step gives 0.096."
    )
    assert constant_factor(2 * theirs, theirs) == pytest.approx(2.0)
    assert constant_factor(theirs, theirs) is None  # equal: no factor to tell
    assert constant_factor(mine, theirs) is None


# --- the declarations ---------------------------------------------------------------------


def test_a_typo_in_a_code_fails_where_it_is_made(tmp_path: Path) -> None:
    with pytest.raises(UnknownDiagnosis, match="missing-zero-grads"):
        declared("missing-zero-grads")
    with pytest.raises(UnknownDiagnosis):
        Explanation(("missing-zero-grads",), "a model")
    with pytest.raises(ValueError, match="no such diagnosis code"):
        GradeReport.model_validate(
            {
                **judge_source(get_exercise("train-step"), "x = 1\n").model_dump(),
                "diagnosis": "oops",
            }
        )
    folder = tmp_path / "train-step"
    folder.mkdir()
    for path in (EXERCISES_DIR / "train-step").rglob("*"):
        if path.is_file():
            target = folder / path.relative_to(EXERCISES_DIR / "train-step")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    toml = folder / "exercise.toml"
    toml.write_text(toml.read_text().replace('"missing-step"', '"missing-stepp"', 1))
    with pytest.raises(ExerciseRefused, match="missing-stepp"):
        load_exercise(folder)


def test_a_code_declared_twice_or_half_declared_is_refused() -> None:
    one = Declared(code="some-code", name="Some", words="Words.")
    with pytest.raises(DiagnosisDeclarationError, match="declared twice"):
        _checked([one, Declared(code="some-code", name="Other", words="Other.")])
    with pytest.raises(DiagnosisDeclarationError, match="a name and words"):
        _checked([Declared(code="no-words", name="Name", words=" ")])
    with pytest.raises(DiagnosisDeclarationError, match="no such context"):
        _checked([Declared(code="c", name="N", words="W.", said_in={"nowhere": "x"})])  # type: ignore[dict-item]


def test_every_code_has_one_declaration_with_a_name_words_and_a_place() -> None:
    records = registry()
    assert len(records) >= 49
    for code_, record in records.items():
        assert record.code == code_ and record.name and record.words


def test_a_declared_hint_links_its_lesson_only_where_the_prompt_has_it() -> None:
    hints = hints_for("scheduler-epochs", "scheduler-never")
    assert hints is not None and hints.lesson == "schedule"
    record = declared("scheduler-never")
    assert record.hint is not None and record.hint.lesson == "schedule"


# --- the words of the diagnoses -------------------------------------------------------------


def test_words_that_were_false_on_real_mistakes_are_not_said() -> None:
    train_step, accumulate = get_exercise("train-step"), get_exercise("accumulate-microbatches")
    incorrect = diagnosis_words("incorrect", train_step)
    assert "checks below" in incorrect and "above" not in incorrect
    assert "results differ" not in incorrect
    # The lesson's order closes what is about the order only.
    assert "zero, backward, step" not in incorrect
    assert "zero, backward, step" not in diagnosis_words("correct", get_exercise("clip-gradients"))
    assert "zero, backward, step" in diagnosis_words("missing-zero-grad", train_step)
    # Adam's step is the same for any gradient scale: "every step is N times too large" is not.
    assert "too large" not in diagnosis_words("wrong-loss-scaling", accumulate)
    # The factor of a summed loss is the batch's size or its number of values.
    assert "number of values times" not in diagnosis_words("loss-sum-not-mean", train_step)
    # An optimizer made anew loses Adam's state as well as SGD's momentum.
    recreated = diagnosis_words("optimizer-recreated", get_exercise("adam-step"))
    assert "plain SGD step" not in recreated and "Adam's running averages" in recreated
    # Micro-batches: each extra step may use another micro-batch's gradient.
    assert "same gradients again" not in diagnosis_words("step-twice", accumulate)
    # A scheduler stepped before each batch is stepped once per batch, not "after" it.
    assert "after every batch" not in diagnosis_words(
        "scheduler-per-batch", get_exercise("scheduler-epochs")
    )
    hints = hints_for("train-step", "runtime-error")
    assert hints is not None and "last line of the traceback" not in hints.levels[0]
    assert "first frame in your code" in hints.levels[0]
    # clip_grad_norm_ called in its place on a used-up generator: the words allow it.
    assert "used up" in diagnosis_words("missing-clip", get_exercise("clip-gradients"))


# --- the examples, judged -----------------------------------------------------------


STEP = """
def train_step(model, optimizer, loss_fn, x, y):
    {body}
"""


def step(*lines: str) -> str:
    return code(STEP.format(body="\n    ".join(lines)))


def test_an_update_off_by_a_factor_says_the_factor_not_a_cause() -> None:
    report = judge_source(
        get_exercise("train-step"),
        step(
            "optimizer.zero_grad()",
            "loss = loss_fn(model(x), y)",
            "(loss * 3).backward()",
            "optimizer.step()",
            "return loss.item()",
        ),
    )
    said = everything_said(report)
    assert "A right step gives" not in said
    update = failing(report).get("update-uses-current-batch", "")
    assert "is not one step on this call's gradient" not in said
    assert "differs from the reference's step" in update, update


def test_a_wrong_value_is_said_as_the_learners_then_the_references() -> None:
    report = judge_source(
        get_exercise("train-step"),
        step(
            "import torch",
            "optimizer.zero_grad()",
            "loss = loss_fn(model(x), y)",
            "loss.backward()",
            "with torch.no_grad():",
            "    model.weight.grad += 0.5",
            "optimizer.step()",
            "return loss.item()",
        ),
    )
    update = failing(report)["update-uses-current-batch"]
    assert "; the reference's step gives " in update and "After the call, `weight[" in update


def test_gradients_released_after_backward_are_not_said_never_computed() -> None:
    report = judge_source(
        get_exercise("train-step"),
        step(
            "loss = loss_fn(model(x), y)",
            "loss.backward()",
            "optimizer.zero_grad()",
            "optimizer.step()",
            "return loss.item()",
        ),
    )
    said = everything_said(report)
    assert "no gradient was computed" not in said
    assert "stepped with no gradient" not in said
    fresh = failing(report)["fresh-gradients"]
    assert RELEASED_AFTER_BACKWARD.words in fresh, fresh
    assert "`backward()`, `zero_grad()`, `step()`" in failing(report)["update-uses-current-batch"]


def test_code_that_never_steps_is_not_told_it_stepped() -> None:
    report = judge_source(
        get_exercise("train-step"),
        step(
            "optimizer.zero_grad()",
            "loss = loss_fn(model(x), y)",
            "loss.backward()",
            "return loss.item()",
        ),
    )
    assert "stepped" not in everything_said(report)


def test_clearing_after_the_step_passes_with_a_message_true_of_it() -> None:
    report = judge_source(
        get_exercise("train-step"),
        step(
            "loss = loss_fn(model(x), y)",
            "optimizer.zero_grad()",
            "loss.backward()",
            "optimizer.step()",
            "optimizer.zero_grad()",
            "return loss.item()",
        ),
    )
    fresh = next(c for c in report.checks if c.id == "fresh-gradients")
    assert fresh.passed and "or was cleared after a right step" in fresh.message


def test_praise_of_the_calls_only_for_code_that_made_them() -> None:
    exercise = get_exercise("train-step")
    reference = judge_source(exercise, exercise.solution_code)
    assert TEXTBOOK_ORDER.words in reference.feedback
    by_hand = judge_source(
        exercise,
        step(
            "import torch",
            "optimizer.zero_grad()",
            "loss = loss_fn(model(x), y)",
            "grads = torch.autograd.grad(loss, list(model.parameters()))",
            "for p, g in zip(model.parameters(), grads):",
            "    p.grad = g",
            "optimizer.step()",
            "return loss.item()",
        ),
    )
    assert by_hand.diagnosis == "correct" and by_hand.score == by_hand.max_score
    assert TEXTBOOK_ORDER.words not in by_hand.feedback
    assert "backward()" not in by_hand.feedback


def test_a_clip_on_a_used_up_generator_is_told_what_its_gradient_is() -> None:
    exercise = get_exercise("clip-gradients")
    source = exercise.solution_code.replace(
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
        "    params = model.parameters()\n    n = len(list(params))\n"
        "    torch.nn.utils.clip_grad_norm_(params, max_norm)",
    )
    assert source != exercise.solution_code
    report = judge_source(exercise, source)
    said = everything_said(report)
    assert "was not called" not in said and "does not hold this call's gradient" not in said
    assert "not clipped" in failing(report)["update-uses-current-batch"]


def test_a_hand_computed_clip_is_not_praised_for_clip_grad_norm() -> None:
    exercise = get_exercise("clip-gradients")
    source = exercise.solution_code.replace(
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
        "    total = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))\n"
        "    for p in model.parameters():\n"
        "        p.grad.mul_(min(1.0, max_norm / (float(total) + 1e-6)))",
    )
    report = judge_source(exercise, source)
    assert report.score == report.max_score
    assert "clip_grad_norm_" not in report.feedback


def test_parameters_replaced_on_resume_are_told_what_the_optimizer_holds() -> None:
    exercise = get_exercise("resume-training")
    source = exercise.solution_code.replace(
        '    model.load_state_dict(state["model"])',
        '    import torch\n    for name, value in state["model"].items():\n'
        "        setattr(model, name, torch.nn.Parameter(value.clone()))",
    )
    report = judge_source(exercise, source)
    said = everything_said(report)
    assert "momentum restarts" not in said
    restored = failing(report).get("optimizer-restored", "")
    assert "for the model's (first layer's) weight" in restored, restored


def test_two_equal_gradients_are_not_told_the_second_is_twice_the_first() -> None:
    exercise = get_exercise("prove-accumulation")
    report = judge_source(exercise, exercise.solution_code)
    passed = next(c for c in report.checks if c.id == "second-is-double")
    assert "twice the first" not in passed.message


def test_hand_written_adam_is_not_told_it_steps_adam() -> None:
    exercise = get_exercise("adam-step")
    assert "steps Adam once" not in diagnosis_words("correct", exercise)


@pytest.mark.parametrize("exercise_id", ["train-step", "clip-gradients", "fix-the-loop"])
def test_what_the_reference_is_told_is_proven_true(exercise_id: str) -> None:
    exercise = get_exercise(exercise_id)
    report, traces = told(exercise, exercise.solution_code)
    problems, said = false_claims(exercise, report, traces)
    assert problems == [] and said >= 1


def test_a_false_claim_fails_the_proof() -> None:
    exercise = get_exercise("train-step")
    by_hand = step(
        "import torch",
        "optimizer.zero_grad()",
        "loss = loss_fn(model(x), y)",
        "grads = torch.autograd.grad(loss, list(model.parameters()))",
        "for p, g in zip(model.parameters(), grads):",
        "    p.grad = g",
        "optimizer.step()",
        "return loss.item()",
    )
    report, traces = told(exercise, by_hand)
    lying = report.model_copy(update={"feedback": report.feedback + " " + TEXTBOOK_ORDER.words})
    problems, said = false_claims(exercise, lying, traces)
    assert said == 1 and len(problems) == 1 and "contradict" in problems[0]


def test_rewording_the_correct_sentence_keeps_the_version(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "train-step"
    shutil.copytree(EXERCISES_DIR / "train-step", folder)
    before = load_exercise(folder).version
    toml = folder / "exercise.toml"
    toml.write_text(toml.read_text().replace('correct = "After every', 'correct = "After each'))
    assert load_exercise(folder).correct.startswith("After each")
    assert load_exercise(folder).version == before
    toml.write_text(toml.read_text().replace("lr = ", "lr = 0.5 * 0 + ", 0) + "\n")
    assert load_exercise(folder).version == before  # a blank line changes nothing judged


# --- verdicts from what the code did to the values (invariant 9) ---------------------------


def test_micro_batches_accumulated_with_autograd_grad_score_full_marks() -> None:
    """Gradients from `torch.autograd.grad`, added into `.grad` by hand, micro-batch by
    micro-batch: no `backward()` is recorded, and every value is the accumulated one."""
    exercise = get_exercise("accumulate-microbatches")
    source = code(
        """
        import torch

        def accumulated_step(model, optimizer, loss_fn, micro_batches):
            weights = list(model.parameters())
            for w in weights:
                w.grad = None
            mean = 0.0
            for inputs, targets in micro_batches:
                part = loss_fn(model(inputs), targets) / len(micro_batches)
                for w, g in zip(weights, torch.autograd.grad(part, weights)):
                    w.grad = g.clone() if w.grad is None else w.grad + g
                mean += part.item()
            optimizer.step()
            return mean
        """
    )
    report = judge_source(exercise, source)
    assert report.score == exercise.max_score and report.diagnosis == "correct", failing(report)
    assert "backward()" not in report.feedback


def _epoch_loop(schedule: str) -> str:
    """A scheduler-epochs loop that sets each epoch's rate itself (`schedule` is an expression
    of `epoch`, `base` and the given scheduler) and never steps the scheduler it is given."""
    return code(
        f"""
        def train(model, optimizer, scheduler, loss_fn, batches, epochs):
            base = optimizer.param_groups[0]["lr"]
            means = []
            for epoch in range(epochs):
                for group in optimizer.param_groups:
                    group["lr"] = {schedule}
                total = 0.0
                for inputs, targets in batches:
                    optimizer.zero_grad()
                    loss = loss_fn(model(inputs), targets)
                    loss.backward()
                    optimizer.step()
                    total += loss.item()
                means.append(total / len(batches))
            return means
        """
    )


def test_a_schedule_of_the_learners_own_making_is_judged_by_the_rates_its_steps_applied() -> None:
    exercise = get_exercise("scheduler-epochs")
    own = _epoch_loop("base * scheduler.gamma ** (epoch // scheduler.step_size)")
    report = judge_source(exercise, own)
    assert report.score == exercise.max_score and report.diagnosis == "correct", failing(report)


def test_a_wrong_decay_at_the_right_time_fails_the_rates_not_their_timing() -> None:
    """Each epoch's rate a third of the last: it changes where StepLR's does (scheduler-steps
    passes) but not by its factor, and the message gives the rate read from the weights."""
    exercise = get_exercise("scheduler-epochs")
    report = judge_source(
        exercise, _epoch_loop("base * (scheduler.gamma / 3) ** (epoch // scheduler.step_size)")
    )
    failed = failing(report)
    assert "scheduler-steps" not in failed and "learning-rates" in failed, failed
    # halving: lr 0.1, StepLR's gamma 0.5 every epoch; this loop's second epoch runs at 0.1/6.
    assert (
        "optimizer step 4 (epoch 2) moved the weights by a step at a learning rate of 0.01667"
        in (failed["learning-rates"])
    )
    assert "the schedule gives epoch 2 0.05" in failed["learning-rates"]


def test_the_rates_are_read_from_what_the_steps_did_not_from_the_optimizer() -> None:
    """The optimizer holds the schedule's rate when each step begins (what the harness reads
    there), but the steps on a doubled loss move the weights as twice that rate would."""
    exercise = get_exercise("scheduler-epochs")
    source = code(
        """
        import torch

        def train(model, optimizer, scheduler, loss_fn, batches, epochs):
            means = []
            for epoch in range(epochs):
                total = 0.0
                for inputs, targets in batches:
                    optimizer.zero_grad()
                    loss = loss_fn(model(inputs), targets)
                    (2 * loss).backward()
                    optimizer.step()
                    total += loss.item()
                scheduler.step()
                means.append(total / len(batches))
            return means
        """
    )
    report = judge_source(exercise, source)
    failed = failing(report)
    assert "learning-rates" in failed and "a learning rate of 0.2;" in failed["learning-rates"]
