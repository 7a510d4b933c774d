"""`loopgrade-client`: log in, list your exercises, submit, read a result, check locally, read
a reference solution your course shows.

Exit status: 0 on success (for `submit` and `status`: full marks only; for `check`: every
check passes on the visible cases), 1 when the code is graded below full marks or a check
fails, 2 for every error, each said in one sentence on stderr (or as `{"error": ...}` with
`--json`), 3 for a submission not graded yet, 141 when the reader of the output went away
(`| head`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path
from typing import Any

from loopgrade_client import report
from loopgrade_client.api import LoopgradeAPI, Submission
from loopgrade_client.config import (
    Login,
    checked_server_url,
    config_path,
    load_login,
    save_login,
)
from loopgrade_client.errors import ClientError, WaitAndRetry
from loopgrade_client.local_check import record_locally

EXIT_OK, EXIT_BELOW_FULL_MARKS, EXIT_ERROR, EXIT_NOT_GRADED_YET = 0, 1, 2, 3
# As a shell reports a program ended by SIGPIPE: what `| head` leaves of any command.
EXIT_OUTPUT_CLOSED = 128 + 13
SOURCE_SUFFIXES = (".py", ".ipynb")


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _api() -> LoopgradeAPI:
    login = load_login()
    return LoopgradeAPI(login.url, login.token)


def login_command(args: argparse.Namespace) -> int:
    url = checked_server_url(args.url)
    token = (args.token_stdin and sys.stdin.readline().strip()) or getpass.getpass(
        f"Personal access token (create one at {url}/account/tokens): "
    ).strip()
    if not token:
        raise ClientError("no token given: create one on the tokens page and paste it")
    with LoopgradeAPI(url, token) as api:
        email = api.exercises().get("email", "")
    path = save_login(Login(url, token))
    if args.json:
        _print_json({"url": url, "email": email, "config": str(path)})
    else:
        print(f"Logged in to {url} as {email}; the token is kept in {path} (mode 0600).")
    return EXIT_OK


def exercises_command(args: argparse.Namespace) -> int:
    with _api() as api:
        data = api.exercises()
    if args.json:
        _print_json(data)
        return EXIT_OK
    groups = [("Practice", data["practice"])] + [
        (f"Course {course.get('name', '')} (--course {course.get('id', '')})", course["exercises"])
        for course in data["courses"]
    ]
    for title, exercises in groups:
        print(title)
        for exercise in exercises:
            if not isinstance(exercise, dict):
                continue
            score = exercise.get("score")
            shown = (
                f"{score:g}/{exercise.get('max_score', 0):g}"
                if isinstance(score, int | float)
                else "-"
            )
            due = f", due {exercise['due_at']}" if exercise.get("due_at") else ""
            solution = ", reference solution shown" if exercise.get("solution") else ""
            print(
                f"  {exercise.get('id', '?'):<28} {exercise.get('state', '?'):<10} {shown:>8}"
                f"{due}{solution}"
            )
    return EXIT_OK


def _read_source(path: Path) -> None:
    if path.suffix not in SOURCE_SUFFIXES:
        raise ClientError(f"{path.name} is not a .py file or a .ipynb notebook")
    if not path.is_file():
        raise ClientError(f"there is no file {path}")


def _show_result(submission: Submission, api: LoopgradeAPI, as_json: bool) -> int:
    if as_json:
        _print_json(submission.raw)
    else:
        print(report.as_text(submission, api.url))
    if submission.status != "graded":
        return EXIT_NOT_GRADED_YET  # queued, running, or to be retried after a server fault
    return EXIT_OK if submission.full_marks else EXIT_BELOW_FULL_MARKS


def submit_command(args: argparse.Namespace) -> int:
    path = Path(args.file)
    _read_source(path)
    with _api() as api:
        submission_id = api.submit(args.exercise, path=path, course=args.course)
        if not args.json:
            print(f"Submitted {path.name} ({submission_id}); waiting for the grade...", flush=True)
        return _show_result(api.wait(submission_id), api, args.json)


def status_command(args: argparse.Namespace) -> int:
    with _api() as api:
        submission = api.submission(args.id)
        if not submission.finished and args.wait:
            submission = api.wait(args.id)
        return _show_result(submission, api, args.json)


def solution_command(args: argparse.Namespace) -> int:
    with _api() as api:
        solution = api.solution(args.exercise, args.course)
    if args.json:
        _print_json({"exercise": args.exercise, "course": args.course, "solution": solution})
    else:
        # The code alone, as it is: `> solution.py` keeps a file that runs.
        print(solution.rstrip())
    return EXIT_OK


def check_command(args: argparse.Namespace) -> int:
    path = Path(args.file)
    _read_source(path)
    if path.suffix == ".ipynb":
        from loopgrade_client.notebook import code_of_notebook

        source = code_of_notebook(path.read_bytes())
    else:
        source = path.read_text(encoding="utf-8")
    with _api() as api:
        kit = api.practice_kit(args.exercise)
        judged = api.practice_check(args.exercise, record_locally(kit, source))
    passed = all(check["passed"] for check in judged["checks"])
    note = (
        "Checked against the visible cases only; nothing was stored. The real grade, with the "
        f"hidden cases, comes from the server: loopgrade-client submit {path} --exercise "
        f"{args.exercise}"
    )
    if args.json:
        _print_json({**judged, "passed": passed, "note": note})
    else:
        print(f"{args.exercise}, visible cases: {judged['diagnosis_text']}")
        for check in judged["checks"]:
            print(f"  {'ok ' if check['passed'] else 'x  '} {check['id']}: {check['message']}")
        if judged["feedback"].strip():
            print("", judged["feedback"].strip(), "", sep="\n")
        print(note)
    return EXIT_OK if passed else EXIT_BELOW_FULL_MARKS


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="loopgrade-client", description="Submit and check loopgrade exercises."
    )
    commands = top.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--json", action="store_true", help="answer in JSON")
        return sub

    login = command("login", f"keep a personal access token for a server (in {config_path()})")
    login.add_argument("url", help="the server's address, e.g. https://loopgrade.example.edu")
    login.add_argument("--token-stdin", action="store_true", help="read the token from stdin")
    login.set_defaults(run=login_command)
    command("exercises", "your courses and exercises with your state").set_defaults(
        run=exercises_command
    )
    submit = command("submit", "submit a .py or .ipynb and wait for its grade")
    submit.add_argument("file")
    submit.add_argument("--exercise", required=True)
    submit.add_argument("--course", help="a course id (see 'exercises'); none: practice")
    submit.set_defaults(run=submit_command)
    status = command("status", "a submission's status and result")
    status.add_argument("id")
    status.add_argument("--wait", action="store_true", help="wait until it is graded")
    status.set_defaults(run=status_command)
    solution = command(
        "solution", "a course exercise's reference solution, once your course shows it"
    )
    solution.add_argument("--exercise", required=True)
    solution.add_argument("--course", required=True, help="a course id (see 'exercises')")
    solution.set_defaults(run=solution_command)
    check = command("check", "run your code on the visible cases here (needs torch)")
    check.add_argument("file")
    check.add_argument("--exercise", required=True)
    check.set_defaults(run=check_command)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the exit
        return code
    except BrokenPipeError:
        # The reader went away (`| head`): no traceback, and nothing more to write to it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OUTPUT_CLOSED
    except ClientError as exc:
        if args.json:
            answer: dict[str, Any] = {"error": str(exc), "kind": type(exc).__name__}
            if isinstance(exc, WaitAndRetry):
                answer["retry_after_seconds"] = exc.retry_after_seconds
            _print_json(answer)
        print(f"loopgrade-client: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("loopgrade-client: stopped", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
