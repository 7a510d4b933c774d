"""A check's sentences are templates declared once, beside their kind (graders.sentences): a
grade stores the key and the values, the words are made when it is read, and rewording one
changes no exercise's version."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from graders.exercises import get_exercise, judged_source
from graders.judging import AT_CALL, AT_CASE, HIDDEN_CHECK_FAILURE
from graders.kinds import step_function
from graders.proving import judge_source, unworded_checks
from graders.sentences import (
    RETIRED,
    SENTENCES,
    Said,
    Sentence,
    SentenceDeclarationError,
    retire,
    worded,
    words_of,
)

GRADERS = Path(__file__).resolve().parents[2] / "graders"


def test_a_sentence_is_declared_once_with_a_key_of_its_owner() -> None:
    with pytest.raises(SentenceDeclarationError, match="two sentences"):
        Sentence("step-function/weights-differ", "Again.")
    with pytest.raises(SentenceDeclarationError, match="owner/name"):
        Sentence("no owner", "Words.")
    with pytest.raises(TypeError, match="needs yours"):
        step_function.UPDATE_VERSUS(where="w", theirs=1.0)


def test_a_said_sentence_is_worded_from_its_values_parts_included() -> None:
    said = step_function.WEIGHTS_DIFFER(
        at=AT_CALL(case=Said(key="judging/in-case", values={"case": "basic"}), call=2),
        difference=Said(
            key="judging/difference",
            values={"where": "weight[0][1]", "yours": -0.2291, "theirs": 0.0963, "gap": 0.3254},
        ),
    )
    stored = said.model_dump(mode="json")  # as a grade keeps it
    assert worded(stored) == (
        "In case `basic`, call 2: your weights differ from the reference loop's: `weight[0][1]` "
        "is -0.2291 where 0.0963 was expected (off by 0.325)."
    )
    assert worded({"key": "step-function/no-such-sentence", "values": {}}) is None
    assert worded({"key": "step-function/update-factor", "values": {}}) is None  # a value short
    assert worded({"key": "judging/in-case", "values": {"case": "{0.__class__}"}}) == (
        "case `{0.__class__}`"  # a value is never a template
    )
    infinite = step_function.UPDATE_FACTOR(factor=math.inf)
    assert infinite.values == {"factor": "inf"} and words_of(infinite) == (
        "Your update is inf times the reference's."
    )


def test_a_key_stored_before_a_kind_said_the_shared_sentence_is_worded_as_it() -> None:
    """The first units' kinds said "In case `basic`" and "..., call 2" under keys of their
    own; they say judging's now, and a grade stored with an old key reads as it did."""
    case = Said(key="judging/in-case", values={"case": "basic"})
    difference = Said(
        key="judging/difference",
        values={"where": "weight[0][1]", "yours": -0.2291, "theirs": 0.0963, "gap": 0.3254},
    )
    at = {"case": case, "call": 2}
    old = Said(key="step-function/at-call", values=at)  # as a grade stored it before
    stored = step_function.WEIGHTS_DIFFER(at=old, difference=difference).model_dump(mode="json")
    said_now = step_function.WEIGHTS_DIFFER(at=AT_CALL(**at), difference=difference)
    assert worded(stored) == words_of(said_now)
    assert words_of(said_now).startswith("In case `basic`, call 2: your weights differ")
    assert worded({"key": "evaluation/at-case", "values": {"case": case}}) == "In case `basic`"
    assert worded({"key": "mixed-precision-step/passed-returns-float"}) == "Returns a Python float."
    assert worded({"key": "gradient-reading/nothing-numeric"}) == "nothing numeric"
    assert RETIRED["step-function/at-call"] is AT_CALL and RETIRED["epoch-loop/at-case"] is AT_CASE
    exercise = get_exercise("train-step")  # a step-function exercise says the shared one
    report = judge_source(exercise, exercise.variants[0].source)
    graded = " ".join(c.said.model_dump_json() for c in report.checks if c.said is not None)
    assert '"judging/at-call"' in graded and "step-function/at-call" not in graded
    with pytest.raises(SentenceDeclarationError, match="two sentences"):
        Sentence("evaluation/at-case", "A new sentence under a key old grades hold.")
    with pytest.raises(SentenceDeclarationError, match="declared already"):
        retire("judging/at-case", AT_CASE)


def test_a_graded_check_stores_its_sentence_and_a_hidden_one_its_fixed_words() -> None:
    exercise = get_exercise("clip-gradients")
    report = judge_source(exercise, exercise.variants[0].source)
    failing = [check for check in report.checks if not check.passed]
    assert failing and all(check.said is not None for check in failing)
    for check in failing:
        assert check.said is not None and worded(check.said) == check.message
    passed = [check for check in report.checks if check.passed]
    assert all(check.said is not None and worded(check.said) == check.message for check in passed)
    hidden_only = Said(key="judging/hidden-case-fails")
    assert worded(hidden_only) == HIDDEN_CHECK_FAILURE


def test_rewording_a_sentence_changes_no_version_but_a_changed_value_does() -> None:
    source = (GRADERS / "kinds" / "step_function.py").read_text()
    judged = judged_source(source)
    text = '"{at}: the weights did not change at all."'
    assert text in source
    reworded = source.replace(text, '"{at}: nothing in the weights changed."')
    assert judged_source(reworded) == judged
    said = "WEIGHTS_UNCHANGED(at=at)"
    assert said in source
    assert judged_source(source.replace(said, "WEIGHTS_UNCHANGED(at=None)")) != judged


def test_every_declared_sentence_is_a_template_of_named_fields() -> None:
    assert len(SENTENCES) >= 30
    for key, sentence in SENTENCES.items():
        assert sentence.key == key and "/" in key
        assert all(name.isidentifier() for name in sentence.fields)


def test_the_proof_refuses_a_check_said_as_plain_text() -> None:
    exercise = get_exercise("train-step")
    report = judge_source(exercise, exercise.variants[0].source)
    assert unworded_checks(exercise, report) == []
    plain = report.model_copy(
        update={"checks": [report.checks[0].model_copy(update={"said": None}), *report.checks[1:]]}
    )
    (problem,) = unworded_checks(exercise, plain)
    assert "is a plain text, not a declared Sentence" in problem


def test_rewording_a_fact_changes_no_version_but_its_values_do() -> None:
    """The facts of a diagnosis (graders.fitting's notes) are sentences, out of the version."""
    source = (GRADERS / "fitting.py").read_text()
    judged = judged_source(source)
    text = '"Your updates use a learning rate of {lr:.4g} in every case, not the optimizer\'s.",'
    assert text in source
    assert judged_source(source.replace(text, '"A learning rate of {lr:.4g} everywhere.",')) == (
        judged
    )
    said = "CONSTANT_LR(lr=value)"
    assert said in source
    assert judged_source(source.replace(said, "CONSTANT_LR(lr=spec.lr)")) != judged
