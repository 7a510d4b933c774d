"""`loopgrade-client`, installed from its wheel, against a real `loopgrade serve`: login,
exercises, submit (.py and .ipynb), status, check, and a sentence for each error."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pexpect
import pytest

from graders.exercises import get_exercise
from tests.app.conftest import CORRECT_CODE, EXERCISE, MISSING_ZERO_GRAD_CODE
from tests.client.conftest import CourseOfBen, Installed, Server
from tests.servers import free_port


def run(
    installed: Installed, config: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopgrade_client.cli", *args],
        env=installed.env(config),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def ben(installed_client: Installed, server: Server, tmp_path: Path) -> Path:
    """Ben's config, logged in with `--token-stdin`."""
    config = tmp_path / "config" / "client.json"
    token = server.tokens["ben@example.org"]
    logged_in = run(installed_client, config, "login", server.url, "--token-stdin", stdin=token)
    assert logged_in.returncode == 0, logged_in.stderr
    return config


def test_the_wheel_holds_the_client_alone_and_needs_httpx_only(
    installed_client: Installed,
) -> None:
    with zipfile.ZipFile(installed_client.wheel) as wheel:
        names = wheel.namelist()
        metadata = next(n for n in names if n.endswith("METADATA"))
        requires = [
            line
            for line in wheel.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist")
        ]
        entry_points = wheel.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert {name.split("/")[0] for name in names} == {
        "loopgrade_client",
        next(n for n in names if ".dist-info/" in n).split("/")[0],
    }
    assert requires == ["Requires-Dist: httpx>=0.27"]
    assert "loopgrade-client = loopgrade_client.cli:main" in entry_points


def test_login_asks_for_the_token_and_keeps_it_for_the_user_alone(
    installed_client: Installed, server: Server, tmp_path: Path
) -> None:
    config = tmp_path / "config" / "client.json"
    login = pexpect.spawn(
        sys.executable,
        ["-m", "loopgrade_client.cli", "login", server.url],
        env=installed_client.env(config),
        encoding="utf-8",
        timeout=120,
    )
    login.expect("Personal access token")
    login.sendline(server.tokens["ben@example.org"])
    login.expect(pexpect.EOF)
    login.close()
    assert login.exitstatus == 0, login.before
    assert server.tokens["ben@example.org"] not in (login.before or "")  # not echoed
    assert "as ben@example.org" in (login.before or "")
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {
        "url": server.url,
        "token": server.tokens["ben@example.org"],
    }

    wrong = run(
        installed_client,
        tmp_path / "other.json",
        "login",
        server.url,
        "--token-stdin",
        stdin="lgp_wrong",
    )
    assert wrong.returncode == 2
    assert "refused your token" in wrong.stderr and "not known" in wrong.stderr
    assert wrong.stderr.count("login") == 1  # what to do, said once
    assert not (tmp_path / "other.json").exists()


def test_submit_prints_the_result_and_exits_0_only_on_full_marks(
    installed_client: Installed, server: Server, ben: Path, tmp_path: Path
) -> None:
    correct = tmp_path / "step.py"
    correct.write_text(CORRECT_CODE)
    graded = run(installed_client, ben, "submit", str(correct), "--exercise", EXERCISE)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert "10/10 points" in graded.stdout
    assert "Failing checks" not in graded.stdout
    assert f"On the web: {server.url}/submissions/" in graded.stdout

    notebook = tmp_path / "step.ipynb"
    notebook.write_text(
        json.dumps(
            {
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {},
                "cells": [
                    {
                        "cell_type": "code",
                        "metadata": {},
                        "outputs": [],
                        "execution_count": None,
                        "source": ["%matplotlib inline\n", MISSING_ZERO_GRAD_CODE],
                    },
                ],
            }
        )
    )
    buggy = run(installed_client, ben, "submit", str(notebook), "--exercise", EXERCISE, "--json")
    assert buggy.returncode == 1, buggy.stderr
    result = json.loads(buggy.stdout)
    assert result["diagnosis"] == "missing-zero-grad" and result["by_token"] is True
    assert result["score"] < result["max_score"]
    assert any("matplotlib" in notice for notice in result["notices"])

    words = run(installed_client, ben, "status", result["id"])
    assert words.returncode == 1
    assert "Failing checks:" in words.stdout
    assert result["diagnosis_text"] in words.stdout

    listing = run(installed_client, ben, "exercises", "--json")
    states = {e["id"]: e["state"] for e in json.loads(listing.stdout)["practice"]}
    assert states[EXERCISE] == "solved"
    text = run(installed_client, ben, "exercises")
    assert text.returncode == 0 and "Practice" in text.stdout and EXERCISE in text.stdout


def test_another_learners_submission_is_not_found(
    installed_client: Installed, server: Server, ben: Path, tmp_path: Path
) -> None:
    cat = tmp_path / "cat.json"
    run(
        installed_client,
        cat,
        "login",
        server.url,
        "--token-stdin",
        stdin=server.tokens["cat@example.org"],
    )
    code = tmp_path / "step.py"
    code.write_text(CORRECT_CODE)
    cats = json.loads(
        run(installed_client, cat, "submit", str(code), "--exercise", EXERCISE, "--json").stdout
    )
    seen_by_ben = run(installed_client, ben, "status", cats["id"])
    assert seen_by_ben.returncode == 2
    assert "you have no submission with id" in seen_by_ben.stderr


def test_each_error_is_one_sentence(
    installed_client: Installed, server: Server, ben: Path, tmp_path: Path
) -> None:
    code = tmp_path / "step.py"
    code.write_text(CORRECT_CODE)
    not_a_course = run(
        installed_client,
        ben,
        "submit",
        str(code),
        "--exercise",
        EXERCISE,
        "--course",
        "no-such-course",
    )
    assert not_a_course.returncode == 2
    assert "not enrolled" in not_a_course.stderr
    unknown = run(installed_client, ben, "submit", str(code), "--exercise", "no-such-exercise")
    assert unknown.returncode == 2 and "unknown exercise" in unknown.stderr
    not_python = tmp_path / "step.txt"
    not_python.write_text(CORRECT_CODE)
    assert (
        "not a .py file"
        in run(installed_client, ben, "submit", str(not_python), "--exercise", EXERCISE).stderr
    )
    offline = tmp_path / "offline.json"
    offline.write_text(json.dumps({"url": f"http://127.0.0.1:{free_port()}", "token": "x"}))
    unreachable = run(installed_client, offline, "exercises")
    assert unreachable.returncode == 2 and "cannot reach" in unreachable.stderr
    nobody = run(installed_client, tmp_path / "none.json", "exercises", "--json")
    assert nobody.returncode == 2
    assert "not logged in" in json.loads(nobody.stdout)["error"]
    for result in (not_a_course, unknown, unreachable, nobody):
        assert "Traceback" not in result.stderr


def test_check_runs_the_visible_cases_here_and_says_the_grade_is_the_servers(
    installed_client: Installed, ben: Path, tmp_path: Path
) -> None:
    correct = tmp_path / "step.py"
    correct.write_text(CORRECT_CODE)
    passed = run(installed_client, ben, "check", str(correct), "--exercise", EXERCISE)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert f"{EXERCISE}, visible cases: " in passed.stdout
    assert "ok  runs: Every case ran to the end." in passed.stdout
    assert "The real grade, with the" in passed.stdout and "nothing was stored" in passed.stdout

    # The server's words for the same mistake: its diagnosis, and each visible check's sentence
    # as the grading of the same code says it.
    buggy = tmp_path / "buggy.py"
    buggy.write_text('print("hello from the learner")\n' + MISSING_ZERO_GRAD_CODE)
    failed = run(installed_client, ben, "check", str(buggy), "--exercise", EXERCISE, "--json")
    assert failed.returncode == 1, failed.stderr
    checked = json.loads(failed.stdout)  # the learner's print went to stderr
    assert "hello from the learner" in failed.stderr
    assert not checked["passed"] and checked["diagnosis"] == "missing-zero-grad"
    graded = json.loads(
        run(installed_client, ben, "submit", str(buggy), "--exercise", EXERCISE, "--json").stdout
    )
    assert (checked["diagnosis"], checked["diagnosis_text"]) == (
        graded["diagnosis"],
        graded["diagnosis_text"],
    )
    servers = {check["id"]: check for check in graded["checks"] if not check["hidden"]}
    for check in checked["checks"]:
        assert check["passed"] == servers[check["id"]]["passed"]
        assert check["message"].split(" (")[0] == servers[check["id"]]["message"].split(" (")[0]
    assert "records[" not in failed.stdout

    broken = tmp_path / "broken.py"
    broken.write_text("def train_step(model, optimizer, loss_fn, x, y)\n    pass\n")
    said = run(installed_client, ben, "check", str(broken), "--exercise", EXERCISE)
    assert said.returncode == 1 and "Syntax error" in said.stdout and "Line 1" in said.stdout


def test_the_reference_solution_is_shown_once_the_course_shows_it_and_never_before(
    installed_client: Installed, ben: Path, course_of_ben: CourseOfBen
) -> None:
    course = course_of_ben
    reference = get_exercise(course.released).solution_code
    shown = run(
        installed_client, ben, "solution", "--exercise", course.released, "--course", course.id
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == reference.rstrip() + "\n"  # the code alone: `> solution.py` runs

    # Its due date ahead: not shown, said in one sentence.
    held = run(installed_client, ben, "solution", "--exercise", course.held, "--course", course.id)
    assert held.returncode == 2 and held.stdout == ""
    assert held.stderr.startswith(
        f"loopgrade-client: your course does not show the reference solution of {course.held}"
    )
    assert held.stderr.count("\n") == 1
    assert get_exercise(course.held).solution_code.splitlines()[1] not in held.stderr
    elsewhere = run(
        installed_client, ben, "solution", "--exercise", course.released, "--course", "x"
    )
    assert elsewhere.returncode == 2 and "you are in no course 'x'" in elsewhere.stderr

    listing = run(installed_client, ben, "exercises")
    marked = [line.split()[0] for line in listing.stdout.splitlines() if "solution shown" in line]
    assert marked == [course.released]

    # A result in the course carries it (text and JSON); the same exercise in practice does not.
    in_course = run(installed_client, ben, "status", course.submission_in_course)
    assert "The reference solution (your course shows it now that the due date has passed):" in (
        in_course.stdout
    )
    assert "    " + reference.strip().splitlines()[-1] in in_course.stdout
    as_json = run(installed_client, ben, "status", course.submission_in_course, "--json")
    assert json.loads(as_json.stdout)["solution"] == reference
    in_practice = run(installed_client, ben, "status", course.submission_in_practice)
    assert in_practice.stdout and "reference solution" not in in_practice.stdout
