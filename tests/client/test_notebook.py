"""The notebook magic and `loopgrade_client.submit` in a real Jupyter kernel the test starts,
against a real `loopgrade serve`: the result comes back as HTML with the server's chart."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from html import escape, unescape
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager, start_new_kernel
from sqlalchemy import func, select

from app.db import create_db_engine, create_session_factory
from app.models import Submission
from graders.exercises import get_exercise
from tests.app.conftest import CORRECT_CODE, EXERCISE, MISSING_ZERO_GRAD_CODE
from tests.client.conftest import CourseOfBen, Installed, Server

# Grading runs torch in a sandbox on a loaded machine: as patient as the server tests.
CELL_TIMEOUT_SECONDS = 300


@pytest.fixture
def kernel(installed_client: Installed, server: Server, tmp_path: Path) -> Iterator[Any]:
    config = tmp_path / "client.json"
    config.write_text(json.dumps({"url": server.url, "token": server.tokens["ben@example.org"]}))
    manager: KernelManager
    manager, client = start_new_kernel(
        kernel_name="python3", env=installed_client.env(config), startup_timeout=120
    )
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def execute(client: Any, code: str) -> list[dict[str, Any]]:
    """Run a cell; the outputs it displayed (display_data and execute_result data), in order."""
    outputs: list[dict[str, Any]] = []

    def keep(message: dict[str, Any]) -> None:
        kind = message["msg_type"]
        if kind in ("display_data", "execute_result"):
            outputs.append(message["content"]["data"])
        elif kind == "error":
            outputs.append({"error": "\n".join(message["content"]["traceback"])})
        elif kind == "stream":
            outputs.append({"stream": message["content"]["text"]})

    reply = client.execute_interactive(code, timeout=CELL_TIMEOUT_SECONDS, output_hook=keep)
    assert reply["content"]["status"] == "ok", outputs
    return outputs


def html_of(outputs: list[dict[str, Any]]) -> str:
    (html,) = [output["text/html"] for output in outputs if "text/html" in output]
    return str(html)


def test_the_cell_magic_submits_the_cell_and_shows_the_result_with_its_chart(kernel: Any) -> None:
    execute(kernel, "%load_ext loopgrade_client")
    html = html_of(execute(kernel, f"%%loopgrade {EXERCISE}\n{CORRECT_CODE}"))
    assert "10/10 points" in html
    assert "<svg" in html  # the server's loss chart, drawn by the server
    assert "See it on the web" in html
    # The magic ran the cell too: the function exists in the notebook.
    assert "function" in str(execute(kernel, "print(type(train_step).__name__)"))


def test_submit_takes_a_function_object_and_says_what_is_wrong(kernel: Any) -> None:
    execute(kernel, MISSING_ZERO_GRAD_CODE)
    html = html_of(execute(kernel, "import loopgrade_client\nloopgrade_client.submit(train_step)"))
    assert "✗" in html and "fresh-gradients" in html
    assert "10/10" not in html
    # The feedback rendered as the page renders it, and the first of the hints to open.
    feedback = html.split('class="loopgrade-feedback">')[1].split("</div>")[0]
    assert "<code>" in feedback and "`" not in feedback and "**" not in feedback
    assert "<summary>Show a hint (1 of 3)</summary>" in html
    assert "The next ones open one at a time" in html
    assert 'font-size="11"' in html  # the charts' labels at the page's size
    refused = html_of(
        execute(kernel, "loopgrade_client.submit(train_step, exercise='no-such-exercise')")
    )
    assert "loopgrade:" in refused and "unknown exercise" in refused
    execute(kernel, "%load_ext loopgrade_client")
    usage = html_of(execute(kernel, textwrap.dedent("%%loopgrade\nx = 1\n")))
    assert "use it as: %%loopgrade EXERCISE" in usage


def test_a_function_of_another_name_is_submitted_under_the_exercises_or_not_at_all(
    kernel: Any, server: Server
) -> None:
    """The documented `submit(my_loop, exercise=...)`: graded as the function the exercise
    expects; without a known exercise, refused before anything is sent."""
    execute(kernel, MISSING_ZERO_GRAD_CODE.replace("def train_step(", "def my_step("))
    execute(kernel, "import loopgrade_client")
    html = html_of(execute(kernel, f"loopgrade_client.submit(my_step, exercise={EXERCISE!r})"))
    assert "fresh-gradients" in html and "Function not found" not in html
    stored = submissions_of(server)
    refused = unescape(html_of(execute(kernel, "loopgrade_client.submit(my_step)")))
    assert "unknown exercise 'my-step'; nothing was sent" in refused
    lambdas = html_of(execute(kernel, "loopgrade_client.submit(lambda: 0, exercise='x')"))
    assert "a function defined with def" in lambdas
    assert submissions_of(server) == stored


def submissions_of(server: Server) -> int:
    sessions = create_session_factory(create_db_engine(server.database_url))
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Submission)) or 0


def test_the_reference_solution_shows_folded_once_the_course_shows_it(
    kernel: Any, course_of_ben: CourseOfBen
) -> None:
    course = course_of_ben
    execute(kernel, "import loopgrade_client")
    shown = html_of(
        execute(kernel, f"loopgrade_client.solution({course.released!r}, course={course.id!r})")
    )
    assert shown.startswith('<details class="loopgrade-solution"><summary>The reference solution')
    reference = get_exercise(course.released).solution_code
    assert f"<pre><code>{escape(reference.rstrip())}</code></pre>" in shown
    held = unescape(
        html_of(
            execute(kernel, f"loopgrade_client.solution({course.held!r}, course={course.id!r})")
        )
    )
    assert "your course does not show the reference solution" in held and "<pre>" not in held
