"""In Jupyter: `%load_ext loopgrade_client`, then `%%loopgrade EXERCISE [--course C]` on a cell,
or `loopgrade_client.submit(function)`. Both send the code with the login of
`loopgrade-client login` and show the result as HTML, with the charts the server draws.
`loopgrade_client.solution(exercise, course)` shows a reference solution the course shows."""

from __future__ import annotations

import inspect
import json
import shlex
import textwrap
from collections.abc import Callable
from typing import Any

from loopgrade_client import report
from loopgrade_client.api import LoopgradeAPI, Submission
from loopgrade_client.config import load_login
from loopgrade_client.errors import ClientError


class Result:
    """A graded submission; a notebook shows it as HTML, a terminal as text."""

    def __init__(self, submission: Submission, server_url: str) -> None:
        self.submission = submission
        self.server_url = server_url

    @property
    def score(self) -> float | None:
        return self.submission.score

    @property
    def full_marks(self) -> bool:
        return self.submission.full_marks

    def _repr_html_(self) -> str:
        return report.as_html(self.submission, self.server_url)

    def __repr__(self) -> str:
        return report.as_text(self.submission, self.server_url)


class Failure:
    """An error, shown in the notebook as its sentence (no traceback to read through)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def _repr_html_(self) -> str:
        import html

        return (
            f'<p style="color:#b00020"><strong>loopgrade:</strong> {html.escape(self.message)}</p>'
        )

    def __repr__(self) -> str:
        return f"loopgrade: {self.message}"


def submit_code(code: str, exercise: str, course: str | None = None) -> Result:
    login = load_login()
    with LoopgradeAPI(login.url, login.token) as api:
        submission_id = api.submit(exercise, code=code, course=course)
        return Result(api.wait(submission_id), api.url)


def entry_point_of(api: LoopgradeAPI, exercise: str) -> str | None:
    """The name the exercise's function must have; None from a server that does not say."""
    for listed in api.exercises()["practice"]:
        if isinstance(listed, dict) and listed.get("id") == exercise:
            name = listed.get("entry_point")
            return name if isinstance(name, str) and name.isidentifier() else None
    raise ClientError(
        f"unknown exercise {exercise!r}; nothing was sent: 'loopgrade-client exercises' lists "
        "them, and submit(function, exercise=ID) names one"
    )


def submit(
    function: Callable[..., Any], exercise: str | None = None, course: str | None = None
) -> Result | Failure:
    """Submit a function's source (`submit(train_step)`); the exercise is named after it
    (`train_step` is `train-step`) unless given. The function is submitted under the name the
    exercise expects (`train = my_loop` after it), or refused before anything is sent."""
    name = getattr(function, "__name__", "")
    if not callable(function) or not name.isidentifier():
        return Failure("submit a function defined with def (not a lambda, not a class)")
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return Failure("the source of this function cannot be found: define it in a cell first")
    exercise = exercise or name.replace("_", "-")
    try:
        login = load_login()
        with LoopgradeAPI(login.url, login.token) as api:
            expected = entry_point_of(api, exercise)
            if expected is not None and expected != name:
                source += (
                    f"\n\n# loopgrade_client.submit: {name} under the name the exercise expects.\n"
                    f"{expected} = {name}\n"
                )
            submission_id = api.submit(exercise, code=source, course=course)
            return Result(api.wait(submission_id), api.url)
    except ClientError as exc:
        return Failure(str(exc))


class Solution:
    """A course exercise's reference solution; a notebook shows it folded, as the page does."""

    def __init__(self, code: str) -> None:
        self.code = code

    def _repr_html_(self) -> str:
        return report.solution_html(self.code)

    def __repr__(self) -> str:
        return report.solution_text(self.code)


def solution(exercise: str, course: str) -> Solution | Failure:
    """`solution("train-step", course="C")`: the reference solution, once the course shows it
    to you (after the due date, if your instructor chose to); else why not, in a sentence."""
    try:
        login = load_login()
        with LoopgradeAPI(login.url, login.token) as api:
            return Solution(api.solution(exercise, course))
    except ClientError as exc:
        return Failure(str(exc))


def loopgrade_cell(line: str, cell: str) -> Result | Failure:
    """`%%loopgrade EXERCISE [--course C]`: submit the cell's code."""
    words = shlex.split(line)
    course = None
    if "--course" in words:
        at = words.index("--course")
        course = words[at + 1] if at + 1 < len(words) else None
        del words[at : at + 2]
    if len(words) != 1 or (course is None and "--course" in line):
        return Failure("use it as: %%loopgrade EXERCISE [--course COURSE]")
    try:
        return submit_code(cell, words[0], course)
    except ClientError as exc:
        return Failure(str(exc))


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext loopgrade_client`: the cell magic runs the cell too, so its function exists
    in the notebook afterwards, then submits it."""

    def magic(line: str, cell: str) -> Result | Failure:
        ipython.run_cell(cell)
        return loopgrade_cell(line, cell)

    ipython.register_magic_function(magic, magic_kind="cell", magic_name="loopgrade")


def code_of_notebook(data: bytes) -> str:
    """The code cells of a notebook, IPython magics and shell lines left out (as the server
    does when it is uploaded)."""
    try:
        notebook = json.loads(data)
        cells = notebook["cells"]
    except (ValueError, KeyError, TypeError):
        raise ClientError("this .ipynb is not a notebook Jupyter wrote") from None
    parts = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        if text.lstrip().startswith("%%"):
            continue
        parts.append(
            "\n".join(
                line for line in text.splitlines() if not line.lstrip().startswith(("%", "!"))
            )
        )
    return "\n\n".join(parts) + "\n"
