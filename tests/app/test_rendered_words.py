"""A grade stores its facts and codes; its words are rendered when it is read (DESIGN.md,
invariant 8): rewording a diagnosis changes what every stored result says, and no grade."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.db import SessionFactory
from app.grading.jobs import claim_submission, record_report
from app.grading.results import failure_said, shown_result, stored_feedback
from app.grading.submissions import create_submission
from app.models import Submission
from graders import diagnoses
from graders.exercises import get_exercise, judged_source
from graders.grading import RUN_FAILED, failure_line
from graders.proving import judge_source
from graders.sentences import SENTENCES, Sentence

GRADERS = Path(__file__).resolve().parents[2] / "graders"


def stored(exercise_id: str, source: str) -> tuple[Submission, str]:
    """A submission row as record_report stores the report, and the feedback graded."""
    report = judge_source(get_exercise(exercise_id), source)
    row = Submission(
        id="s",
        exercise_id=exercise_id,
        diagnosis=report.diagnosis,
        checks=[],
        plots=[],
        output="",
        **stored_feedback(report),
    )
    return row, report.feedback


def test_a_stored_grade_holds_facts_and_codes_and_reads_as_it_was_graded() -> None:
    exercise = get_exercise("train-step")
    source = exercise.variants[0].source
    row, graded = stored("train-step", source)
    assert row.feedback_claims == []
    assert row.feedback is not None and row.feedback in graded  # the facts alone
    assert "PyTorch" not in row.feedback  # no word of the diagnosis is stored
    assert shown_result(row).feedback == graded
    right, praised = stored("train-step", exercise.solution_code)
    assert right.feedback_claims == ["textbook-order"] and right.feedback == ""
    assert shown_result(right).feedback == praised


def test_rewording_a_diagnosis_rewords_every_stored_result(monkeypatch: pytest.MonkeyPatch) -> None:
    exercise = get_exercise("train-step")
    row, _ = stored("train-step", exercise.variants[0].source)
    assert row.diagnosis is not None
    record = diagnoses.registry()[row.diagnosis]
    reworded = dataclasses.replace(record, words="Freshly reworded.")
    monkeypatch.setitem(diagnoses.registry(), row.diagnosis, reworded)
    assert "Freshly reworded." in (shown_result(row).feedback or "")


def test_a_result_stored_before_is_shown_as_it_was_stored() -> None:
    row = Submission(
        id="old", exercise_id="train-step", diagnosis="correct", feedback="All words, as said.",
        feedback_claims=None, checks=[], plots=[], output="",
    )  # fmt: skip
    assert shown_result(row).feedback == "All words, as said."
    unknown = Submission(
        id="new", exercise_id="no-such-exercise", diagnosis="correct", feedback="Facts.",
        feedback_claims=[], checks=[], plots=[], output="",
    )  # fmt: skip
    assert shown_result(unknown).feedback == "Facts."


def test_words_are_not_part_of_the_judged_version() -> None:
    source = (GRADERS / "fitting.py").read_text()
    judged = judged_source(source)
    words = 'words=(\n            "Your loop computes gradients but never calls `optimizer.step()`'
    assert words in source
    assert judged_source(source.replace(words, words.replace("Your loop", "The loop"))) == judged
    hint = "Look for the line that changes the weights"
    assert judged_source(source.replace(hint, "Find the line")) == judged
    code = 'code="missing-step",'
    assert judged_source(source.replace(code, 'code="missing-stepping",', 1)) != judged
    claims = (GRADERS / "claims.py").read_text()
    said = '"In every call your code cleared the gradients'
    assert judged_source(claims.replace(said, '"In each call your code cleared the gradients')) == (
        judged_source(claims)
    )
    assert judged_source(claims.replace("textbook_order,\n", "cleared_after_backward,\n")) != (
        judged_source(claims)
    )


def test_a_second_mistake_is_stored_as_its_code_and_said_when_read() -> None:
    row, graded = stored(
        "train-step",
        "def train_step(model, optimizer, loss_fn, x, y):\n"
        "    loss = loss_fn(model(x), y)\n"
        "    optimizer.step()\n"
        "    loss.backward()\n"
        "    return loss.item()\n",
    )
    assert row.diagnosis == "step-before-backward"
    assert row.feedback_claims == ["second:missing-zero-grad"]
    assert "second mistake" not in (row.feedback or "")
    shown = shown_result(row).feedback or ""
    assert shown == graded and "second mistake as well (`missing-zero-grad`)" in shown


def test_a_failed_run_is_said_once_and_its_line_is_read_from_the_feedback() -> None:
    source = (
        "def train_step(model, optimizer, loss_fn, x, y):\n"
        "    optimizer.zero_grad()\n"
        "    loss = loss_fn(model(x), y)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    raise ValueError('stopped on purpose')\n"
    )
    row, graded = stored("train-step", source)
    report = judge_source(get_exercise("train-step"), source)
    row.checks = [check.model_dump(mode="json") for check in report.checks]
    runs = next(check for check in report.checks if check.id == "runs")
    assert report.diagnosis == "runtime-error" and "line 6 of your code" in graded
    assert runs.message == RUN_FAILED and "stopped on purpose" not in runs.message
    assert failure_line(failure_said(row), source) == 6
    # A result stored when the runs check held the failure reads it from there.
    old = Submission(
        id="old", exercise_id="train-step", diagnosis="runtime-error", feedback="Whole words.",
        feedback_claims=None, output="", plots=[],
        checks=[{"id": "runs", "passed": False, "points": 0, "max_points": 1,
                 "message": "Your code raised `E` (line 3 of your code): `m`"}],
    )  # fmt: skip
    assert failure_line(failure_said(old), source) == 3


def _reworded(key: str, text: str) -> Sentence:
    """A sentence with new words under a key already declared (as a new version would have)."""
    sentence = object.__new__(Sentence)
    object.__setattr__(sentence, "key", key)
    object.__setattr__(sentence, "text", text)
    return sentence


def test_a_checks_words_are_made_when_read_and_an_old_message_still_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exercise = get_exercise("clip-gradients")
    report = judge_source(exercise, exercise.variants[0].source)
    row = Submission(
        id="s", exercise_id=exercise.id, diagnosis=report.diagnosis, output="", plots=[],
        checks=[check.model_dump(mode="json") for check in report.checks],
        **stored_feedback(report),
    )  # fmt: skip
    shown = {check.id: check for check in shown_result(row).checks}
    graded = {check.id: check for check in report.checks}
    assert all(shown[i].message == graded[i].message for i in graded)
    assert all(check.said is None for check in shown.values())  # words, not keys, are shown
    key = "step-function/weights-differ"
    monkeypatch.setitem(SENTENCES, key, _reworded(key, "{at}: reworded, {difference}."))
    reread = {check.id: check for check in shown_result(row).checks}
    assert reread["weights-match"].message.startswith("In case `basic`, call 1: reworded, `weight")
    # A sentence this version no longer has: the message it was graded with.
    monkeypatch.delitem(SENTENCES, key)
    again = {check.id: check for check in shown_result(row).checks}
    assert again["weights-match"].message == graded["weights-match"].message
    # A check stored before sentences (a message alone) shows that message.
    old = Submission(
        id="old", exercise_id=exercise.id, diagnosis="incorrect", output="", plots=[],
        feedback="Facts.", feedback_claims=[],
        checks=[{"id": "weights-match", "passed": False, "points": 0, "max_points": 3,
                 "message": "Said in the old words."}],
    )  # fmt: skip
    assert shown_result(old).checks[0].message == "Said in the old words."


BACKWARD_TWICE = """def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward(retain_graph=True)
    loss.backward()
    optimizer.step()
    return loss.item()
"""


def test_a_grades_facts_are_worded_when_read_and_old_facts_still_show(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The facts a fitted model shows are sentences too: stored as key and values beside the
    text said then, worded when read; a key this version lost, or a result stored before, shows
    that text."""
    row, graded = stored("train-step", BACKWARD_TWICE)
    said_then = "Your gradients are exactly twice the correct ones: `backward()` ran twice before"
    assert row.diagnosis == "backward-twice"
    assert row.feedback_claims == [
        {
            "key": "fitting/backward-repeated",
            "values": {"times": {"key": "fitting/twice", "values": {}}},
        }
    ]
    assert row.feedback is not None and row.feedback.startswith(said_then)
    assert shown_result(row).feedback == graded
    key = "fitting/backward-repeated"
    monkeypatch.setitem(SENTENCES, key, _reworded(key, "`backward()` ran {times}: reworded."))
    reworded = shown_result(row).feedback or ""
    assert reworded.startswith("`backward()` ran twice: reworded.") and said_then not in reworded
    monkeypatch.delitem(SENTENCES, key)
    assert shown_result(row).feedback == graded
    old = Submission(
        id="old", exercise_id="train-step", diagnosis="backward-twice", output="", plots=[],
        checks=[], feedback="Facts said as text.", feedback_claims=[],
    )  # fmt: skip
    assert (shown_result(old).feedback or "").startswith("Facts said as text.\n\n")


def test_a_grades_facts_round_trip_through_the_database(sessions: SessionFactory) -> None:
    """Stored by record_report in the JSON column beside the claim keys, read back, worded."""
    report = judge_source(get_exercise("train-step"), BACKWARD_TWICE)
    assert report.facts_said
    with sessions.begin() as session:
        submission_id = create_submission(
            session, exercise_id="train-step", learner="l", code=BACKWARD_TWICE
        ).id
    with sessions.begin() as session:
        job = claim_submission(session, submission_id, lease_seconds=30.0)
        assert job is not None and record_report(session, job, report)
    with sessions() as session:
        row = session.get(Submission, submission_id)
        assert row is not None and row.feedback_claims is not None
        assert [said for said in row.feedback_claims if isinstance(said, dict)] == [
            said.model_dump() for said in report.facts_said
        ]
        assert shown_result(row).feedback == report.feedback
