"""Grading from the command line, no server: `python -m graders`, `loopgrade grade`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from graders.exercise import CaseSpec, Exercise
from graders.exercises import UnknownExercise, get_exercise, list_exercises, loaded_exercises
from graders.grade_by_id import grade
from graders.hints import hint_problems
from graders.kinds import SANDBOX_PROGRAM
from graders.notebook import NotebookError, code_from_file
from graders.proving import (
    PROVEN_VARIANTS,
    keep_proof,
    soundness,
    variant_problems,
    wording_problems,
)
from graders.report import GradeReport


def format_report(report: GradeReport) -> str:
    """A report as plain text: the score and diagnosis, one line per check, the feedback."""
    lines = [f"{report.exercise}: {report.score:g}/{report.max_score:g}  {report.diagnosis}", ""]
    width = max((len(check.id) for check in report.checks), default=0) + len(" (hidden)")
    for check in report.checks:
        mark = "PASS" if check.passed else "FAIL"
        name = check.id + (" (hidden)" if check.hidden else "")
        points = f"{check.points:g}/{check.max_points:g}"
        lines.append(f"  {mark}  {name:<{width}}  {points:>7}  {check.message}")
    lines += ["", report.feedback.rstrip()]
    if report.output:
        lines += ["", "What your code printed (visible cases):", report.output.rstrip()]
    return "\n".join(lines)


def read_submission(path: Path) -> tuple[str, list[str]]:
    """The source to grade from a .py or .ipynb file, and notices about what was left out.

    Raises ValueError with a message for the person who gave the file.
    """
    try:
        extracted = code_from_file(path.name, path.read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except NotebookError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return extracted.source, extracted.notices


def grade_file(path: Path, exercise_id: str, as_json: bool) -> int:
    """Grade a file and print the report; 0 when it was graded, 2 when it could not be."""
    try:
        get_exercise(exercise_id)
        source, notices = read_submission(path)
    except UnknownExercise:
        known = ", ".join(exercise.id for exercise in list_exercises())
        print(f"loopgrade: unknown exercise {exercise_id!r}; known: {known}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"loopgrade: {exc}", file=sys.stderr)
        return 2
    for notice in notices:
        print(f"loopgrade: {notice}", file=sys.stderr)
    report = grade(exercise_id, source)
    print(report.model_dump_json(indent=2) if as_json else format_report(report))
    return 0


def check_exercises() -> int:
    """Prove every exercise sound; print what is wrong. 0 when all are sound, 1 otherwise.

    Each exercise's proof is kept (graders.proving.keep_proof): a server started after it
    serves what was proven sound without proving it again."""
    exercises, unloadable = loaded_exercises()
    problems = [f"refused: {reason}" for reason in unloadable.values()]
    problems += shared_positions(exercises)
    for exercise in exercises:
        found = soundness(exercise)
        # As graders.proving.prove() says them: the server refuses an exercise with the first.
        own = found.problems + variant_problems(exercise) + wording_problems(exercise)
        keep_proof(exercise, own)
        # Its hints file's problems are its own too, counted on its line (the proof is kept
        # without them: a hints file is read, and refused, on its own).
        own += [f"hints: {problem}" for problem in hint_problems([exercise])]
        status = "ok" if not own else f"{len(own)} problem(s)"
        print(f"{exercise.position}. {exercise.id} ({exercise.version}): {status}")
        equivalent = sum(v.report is None for v in found.mutants)
        print(
            f"   mutants of the reference: {len(found.mutants)}, {equivalent} equivalent, "
            f"{len(found.survivors())} surviving"
        )
        print(f"   claims said and checked against the recorded calls: {found.claims_checked}")
        for mutant in found.only_incorrect():
            print(f"   diagnosed only as incorrect: {mutant.describe()}")
        if exercise.case_seeds == "per-learner":
            print(f"   per-learner cases: proven on {PROVEN_VARIANTS} learners' seeds")
        problems += own
    for problem in problems:
        print(f"  - {problem}")
    return 1 if problems else 0


def shared_positions(exercises: list[Exercise]) -> list[str]:
    """Two exercises at one position: the default order between them would be a guess."""
    by_position: dict[int, list[str]] = {}
    for exercise in exercises:
        by_position.setdefault(exercise.position, []).append(exercise.folder)
    return [
        f"position {position}: {' and '.join(folders)} share it: give each its own place"
        for position, folders in sorted(by_position.items())
        if len(folders) > 1
    ]


# Where `client-files` writes: the client's package, which ships them (docs/client.md).
CLIENT_PACKAGE = Path(__file__).resolve().parent.parent / "client" / "loopgrade_client"


def client_files() -> dict[str, str]:
    """What `loopgrade-client check` runs and trusts, shipped inside the client's package so a
    server sends it data only: the harness (the sandbox's program, every kind's recorder) and
    the JSON schema of a case it checks the server's cases against."""
    schema = CaseSpec.model_json_schema()
    # What the harness is given of a case (CaseSpec.harness_spec): never whether it is hidden.
    del schema["properties"]["hidden"]
    return {
        "practice_harness.py": SANDBOX_PROGRAM,
        "practice_case_schema.json": json.dumps(schema, indent=1, sort_keys=True) + "\n",
    }


def write_client_files(directory: Path) -> int:
    for name, text in client_files().items():
        (directory / name).write_text(text)
        print(f"wrote {directory / name}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graders", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    grade_parser = commands.add_parser("grade", help="grade a .py or .ipynb file")
    grade_parser.add_argument("file", type=Path)
    grade_parser.add_argument("--exercise", required=True)
    grade_parser.add_argument("--json", action="store_true", help="print the report as JSON")
    commands.add_parser("check", help="prove every exercise sound (check-exercises)")
    client = commands.add_parser(
        "client-files", help="write the harness and case schema the client ships"
    )
    client.add_argument("directory", type=Path, nargs="?", default=CLIENT_PACKAGE)
    args = parser.parse_args(argv)
    if args.command == "grade":
        return grade_file(args.file, args.exercise, args.json)
    if args.command == "client-files":
        return write_client_files(args.directory)
    return check_exercises()
