"""The client against a fake server on loopback that answers what loopgrade never would:
garbage, huge bodies, wrong types, endless event lines, 429 and 503 with Retry-After, code to
run. Each is one sentence and exit status 2, never a traceback or a hang, and nothing a server
sends is ever run."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from graders.cli import client_files
from graders.exercises import get_exercise
from graders.grading import trusted_trajectories
from graders.kinds import SANDBOX_PROGRAM
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.client.conftest import Installed
from tests.client.test_commands import run
from tests.servers import REPO

Answer = Callable[[BaseHTTPRequestHandler], None]


def send(status: int, body: bytes, headers: dict[str, str] | None = None) -> Answer:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


def endless(handler: BaseHTTPRequestHandler) -> None:
    """200 with a body that never ends (no Content-Length), until the client hangs up."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    chunk = b"[" * 65536
    try:
        while True:
            handler.wfile.write(chunk)
    except OSError:
        return


@pytest.fixture
def fake_server() -> Iterator[tuple[str, dict[str, Answer]]]:
    """A server whose answer to each path the test sets (anything else: 404 garbage)."""
    answers: dict[str, Answer] = {}

    class Handler(BaseHTTPRequestHandler):
        def handle_one(self) -> None:
            path = self.path.split("?")[0]
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            answers.get(path, send(404, b"\x00\xff nope"))(self)

        do_GET = do_POST = handle_one

        def log_message(self, *_: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()
        server.server_close()


def login_file(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "client.json"
    config.write_text(json.dumps({"url": url, "token": "lgp_test"}))
    return config


EXERCISES = "/api/v1/me/exercises"
SUBMIT = "/api/v1/me/submissions/upload"


@pytest.mark.parametrize(
    ("path", "answer", "said"),
    [
        (EXERCISES, send(200, b"<html>a captive portal</html>"), "not JSON"),
        (EXERCISES, send(200, b'["a list"]'), "not a JSON object"),
        (EXERCISES, send(200, b'{"practice": 3, "courses": []}'), "no list of practice"),
        (EXERCISES, endless, "over 4 MiB"),
        (EXERCISES, send(200, b"{" + b" " * (5 * 1024 * 1024) + b"}"), "over 4 MiB"),
        (EXERCISES, send(500, b"Internal Server Error"), "the server failed (500)"),
        (EXERCISES, send(401, b'{"detail": {"x": 1}}'), "refused your token"),
        (SUBMIT, send(429, b'{"detail": "slow down"}', {"Retry-After": "37"}), "in 37 s"),
        # Beyond the waits the client makes by itself (SUBMIT_BUSY_WAIT_SECONDS).
        (SUBMIT, send(503, b'{"detail": "graders busy"}', {"Retry-After": "3600"}), "busy"),
        (SUBMIT, send(503, b"", {"Retry-After": "soon; rm -rf"}), "the server is busy"),
        (SUBMIT, send(202, b'{"id": 12}'), "no text for the submission's id"),
        (SUBMIT, send(302, b"", {"Location": "http://example.com/"}), "answered 302"),
    ],
)
def test_a_hostile_answer_is_one_sentence(
    installed_client: Installed,
    fake_server: tuple[str, dict[str, Answer]],
    tmp_path: Path,
    path: str,
    answer: Answer,
    said: str,
) -> None:
    url, answers = fake_server
    answers[path] = answer
    code = tmp_path / "step.py"
    code.write_text(CORRECT_CODE)
    args = ["exercises"] if path == EXERCISES else ["submit", str(code), "--exercise", "x"]
    result = run(installed_client, login_file(tmp_path, url), *args, "--json")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert said in json.loads(result.stdout)["error"]


def test_a_broken_progress_stream_and_a_forged_result_are_handled(
    installed_client: Installed, fake_server: tuple[str, dict[str, Answer]], tmp_path: Path
) -> None:
    """An event line without end fails in words; a result whose checks have the wrong types
    too; a result's chart with a script is never shown in a notebook (report.safe_svg)."""
    url, answers = fake_server
    answers[SUBMIT] = send(202, b'{"id": "s1", "status": "queued"}')
    answers["/api/v1/me/submissions/s1/events"] = send(200, b"event: " + b"x" * (2 * 1024 * 1024))
    code = tmp_path / "step.py"
    code.write_text(CORRECT_CODE)
    config = login_file(tmp_path, url)
    result = run(installed_client, config, "submit", str(code), "--exercise", "x", "--json")
    assert result.returncode == 2
    assert "progress stream" in json.loads(result.stdout)["error"]

    answers["/api/v1/me/submissions/s1"] = send(
        200, json.dumps({"id": "s1", "exercise": "x", "status": "graded", "checks": "all"}).encode()
    )
    forged = run(installed_client, config, "status", "s1")
    assert forged.returncode == 2 and "no list of checks" in forged.stderr

    from loopgrade_client.report import safe_svg

    drawn = '<svg xmlns="http://www.w3.org/2000/svg"><path d="M0 0L1 1"/><text>loss</text></svg>'
    assert safe_svg(drawn) == drawn
    for hostile in (
        '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
        '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>',
        '<svg xmlns="http://www.w3.org/2000/svg"><a href="javascript:x"><text>a</text></a></svg>',
        '<!DOCTYPE svg [<!ENTITY a "aaaa">]><svg xmlns="http://www.w3.org/2000/svg">&a;</svg>',
        "<svg",
    ):
        assert safe_svg(hostile) is None


KIT = f"/api/v1/me/exercises/{EXERCISE}/practice-kit"
CHECK = f"/api/v1/me/exercises/{EXERCISE}/practice-check"
WORDS = {
    "exercise": EXERCISE,
    "diagnosis": "correct",
    "diagnosis_text": "Correct",
    "checks": [{"id": "runs", "passed": True, "message": "as the server says"}],
    "feedback": "",
}


def server_kit(**changes: Any) -> bytes:
    """A practice kit as loopgrade's would be, with `changes`; and, as a hostile server would
    add, code under the old `harness` field that leaves a file behind if it is ever run."""
    exercise = get_exercise(EXERCISE)
    visible = [case for case in exercise.cases if not case.hidden]
    reference = trusted_trajectories(exercise)["reference"]
    kit = {
        "exercise": EXERCISE,
        "version": exercise.version,
        "kind": exercise.kind,
        "entry_point": exercise.entry_point,
        "harness": f"open({str(MARKER)!r}, 'w').write('ran')\n" + SANDBOX_PROGRAM,
        "harness_sha256": hashlib.sha256(SANDBOX_PROGRAM.encode()).hexdigest(),
        "cases": [case.harness_spec() for case in visible],
        "reference": {case.id: reference[case.id].model_dump() for case in visible},
    }
    return json.dumps({**kit, **changes}).encode()


def case(**changes: Any) -> dict[str, Any]:
    """A case as the schema allows one, with `changes`."""
    spec = {"id": "x", "seed": 0, "in_features": 1, "out_features": 1, "batch_size": 1}
    return {**spec, "steps": 1, **changes}


MARKER = Path(tempfile.gettempdir()) / f"loopgrade-client-ran-servers-code-{os.getpid()}"


@pytest.mark.parametrize(
    ("changes", "code", "said"),
    [
        # The harness the client ships runs: the server's code is never looked at.
        ({}, 0, "ok  runs: as the server says"),
        ({"harness_sha256": "0" * 64}, 2, "this client's harness is not the server's"),
        ({"entry_point": "__import__('os').system('true')"}, 2, "names no function"),
        ({"cases": [{"id": "x", "seed": 1, "__reduce__": "os.system"}]}, 2, "cannot check"),
        ({"cases": [case(in_features=10**9)]}, 2, "cannot check"),
        ({"cases": [case(optimizer="os")]}, 2, "cannot check"),
        ({"kind": "no-such-kind"}, 2, "cannot check exercises of kind"),
    ],
)
def test_check_runs_the_clients_own_harness_never_the_servers_code(
    installed_client: Installed,
    fake_server: tuple[str, dict[str, Answer]],
    tmp_path: Path,
    changes: dict[str, Any],
    code: int,
    said: str,
) -> None:
    url, answers = fake_server
    answers[KIT] = send(200, server_kit(**changes))
    answers[CHECK] = send(200, json.dumps(WORDS).encode())
    source = tmp_path / "step.py"
    source.write_text(CORRECT_CODE)
    MARKER.unlink(missing_ok=True)
    checked = run(
        installed_client, login_file(tmp_path, url), "check", str(source), "--exercise", EXERCISE
    )
    assert checked.returncode == code, checked.stdout + checked.stderr
    assert said in checked.stdout + checked.stderr
    assert "Traceback" not in checked.stderr
    assert not MARKER.exists()


def test_the_harness_the_client_ships_is_the_sandboxs_program() -> None:
    """Versioned with the client, written from graders/ by `python -m graders client-files`."""
    package = REPO / "client" / "loopgrade_client"
    for name, text in client_files().items():
        assert (package / name).read_text() == text, (
            f"{name} is not graders' own: run python -m graders client-files"
        )


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://example.org", "plain http"),
        ("http://10.0.0.7:8000", "plain http"),
        ("http://127.0.0.1.example.org", "plain http"),
        ("https://user:secret@example.org", "more than a server's address"),
        ("ftp://example.org", "not a web address"),
    ],
)
def test_login_refuses_plain_http_beyond_this_computer(
    installed_client: Installed, tmp_path: Path, url: str, said: str
) -> None:
    config = tmp_path / "client.json"
    login = run(installed_client, config, "login", url, "--token-stdin", stdin="lgp_secret")
    assert login.returncode == 2 and said in login.stderr, login.stderr
    assert not config.exists()
    # A login kept over plain http (by an older client, by hand) is not used either.
    config.write_text(json.dumps({"url": url, "token": "lgp_secret"}))
    listing = run(installed_client, config, "exercises")
    assert listing.returncode == 2 and said in listing.stderr


def test_login_over_plain_http_to_this_computer_is_allowed(
    installed_client: Installed, fake_server: tuple[str, dict[str, Answer]], tmp_path: Path
) -> None:
    url, answers = fake_server
    answers[EXERCISES] = send(200, b'{"email": "ben@example.org", "practice": [], "courses": []}')
    for loopback in (url, url.replace("127.0.0.1", "localhost")):
        config = tmp_path / "client.json"
        login = run(installed_client, config, "login", loopback, "--token-stdin", stdin="lgp_x")
        assert login.returncode == 0, login.stderr
        assert json.loads(config.read_text())["url"] == loopback


def test_a_submission_still_grading_has_its_own_exit_status(
    installed_client: Installed, fake_server: tuple[str, dict[str, Answer]], tmp_path: Path
) -> None:
    url, answers = fake_server
    config = login_file(tmp_path, url)
    for status, code in (("queued", 3), ("running", 3), ("error", 3)):
        answers["/api/v1/me/submissions/s1"] = send(
            200, json.dumps({"id": "s1", "exercise": "x", "status": status}).encode()
        )
        shown = run(installed_client, config, "status", "s1")
        assert shown.returncode == code, (status, shown.stdout, shown.stderr)
        assert status in shown.stdout or "retried" in shown.stdout
    answers["/api/v1/me/submissions/s1"] = send(
        200,
        json.dumps(
            {"id": "s1", "exercise": "x", "status": "graded", "score": 3, "max_score": 10}
        ).encode(),
    )
    assert run(installed_client, config, "status", "s1").returncode == 1


def test_output_piped_to_a_reader_that_went_away_ends_quietly(
    installed_client: Installed, fake_server: tuple[str, dict[str, Answer]], tmp_path: Path
) -> None:
    """`loopgrade-client exercises | head -1`: the pipe is closed before the client writes
    (its reading end closed first, so no timing is involved)."""
    url, answers = fake_server
    listed = [{"id": f"exercise-{n}", "state": "not-tried"} for n in range(50)]
    answers[EXERCISES] = send(200, json.dumps({"practice": listed, "courses": []}).encode())
    reading, writing = os.pipe()
    os.close(reading)
    try:
        ended = subprocess.run(
            [sys.executable, "-m", "loopgrade_client.cli", "exercises"],
            env=installed_client.env(login_file(tmp_path, url)),
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(writing)
    assert ended.returncode == 141, ended.stderr
    assert ended.stderr == ""


def test_a_servers_markdown_becomes_no_tag_link_or_script() -> None:
    """What the notebook shows of feedback and hints (report.markdown_html): the grader's
    markdown, everything else as text."""
    from loopgrade_client.report import markdown_html

    shown = markdown_html(
        "**Grader note:** [full marks](https://evil.example) <script>alert(1)</script>\n\n"
        "![x](https://evil.example/a.png) `<img src=x onerror=alert(1)>`\n\n"
        "```\n<iframe src=x></iframe>\n```\n- *one*\n- `two`"
    )
    assert "<script" not in shown and "<img" not in shown and "<iframe" not in shown
    assert "<a " not in shown and "href" not in shown
    assert "<strong>Grader note:</strong>" in shown
    assert "<code>&lt;img src=x onerror=alert(1)&gt;</code>" in shown
    assert "<ul><li><em>one</em></li><li><code>two</code></li></ul>" in shown


def test_a_servers_solution_is_shown_as_text_only() -> None:
    """A reference solution in a result (report.as_html, the notebook) is code to read: every
    character of it escaped, whatever the server sends; a forged non-text one is refused."""
    from loopgrade_client.api import Submission
    from loopgrade_client.errors import BadAnswer
    from loopgrade_client.report import as_html, as_text

    hostile = "</code></pre></details><script>alert(1)</script>\ndef train_step(): pass"
    answer = {"id": "s", "exercise": "train-step", "status": "graded", "solution": hostile}
    submission = Submission.from_json(answer)
    shown = as_html(submission, "https://loopgrade.example")
    assert "<script" not in shown and shown.count("</details>") == 1
    assert "&lt;/code&gt;&lt;/pre&gt;&lt;/details&gt;&lt;script&gt;" in shown
    assert "    def train_step(): pass" in as_text(submission, "https://loopgrade.example")
    with pytest.raises(BadAnswer, match="no text for solution"):
        Submission.from_json({**answer, "solution": ["import os"]})


@pytest.mark.parametrize(
    ("words", "said"),
    [
        ({**WORDS, "checks": [{"id": "runs", "passed": "yes", "message": "m"}]}, "pass or fail"),
        ({**WORDS, "diagnosis_text": None}, "no text for diagnosis_text"),
        ({**WORDS, "checks": "all"}, "no list of checks"),
    ],
)
def test_a_forged_check_answer_is_one_sentence(
    installed_client: Installed,
    fake_server: tuple[str, dict[str, Answer]],
    tmp_path: Path,
    words: dict[str, Any],
    said: str,
) -> None:
    url, answers = fake_server
    answers[KIT] = send(200, server_kit())
    answers[CHECK] = send(200, json.dumps(words).encode())
    source = tmp_path / "step.py"
    source.write_text(CORRECT_CODE)
    checked = run(
        installed_client, login_file(tmp_path, url), "check", str(source), "--exercise", EXERCISE
    )
    assert checked.returncode == 2 and said in checked.stderr, checked.stderr
    assert "Traceback" not in checked.stderr


def test_the_wait_a_server_names_is_said_once(
    installed_client: Installed, fake_server: tuple[str, dict[str, Answer]], tmp_path: Path
) -> None:
    url, answers = fake_server
    said = b'{"detail": "Too many submissions. You can submit again in 30 s."}'
    answers[SUBMIT] = send(429, said, {"Retry-After": "30"})
    code = tmp_path / "step.py"
    code.write_text(CORRECT_CODE)
    limited = run(
        installed_client, login_file(tmp_path, url), "submit", str(code), "--exercise", "x"
    )
    assert limited.returncode == 2
    assert limited.stderr.strip().endswith("You can submit again in 30 s.")
    assert limited.stderr.count("30 s") == 1


def test_a_busy_server_s_retry_after_is_waited_and_the_submission_sent_again_with_its_key(
    installed_client: Installed, fake_server: tuple[str, dict[str, Answer]], tmp_path: Path
) -> None:
    url, answers = fake_server
    keys: list[str | None] = []
    busy = send(503, b'{"detail": "graders busy"}', {"Retry-After": "1"})
    accepted = send(202, b'{"id": "s1", "status": "queued"}')

    def busy_twice(handler: BaseHTTPRequestHandler) -> None:
        keys.append(handler.headers.get("Idempotency-Key"))
        (busy if len(keys) <= 2 else accepted)(handler)

    answers[SUBMIT] = busy_twice
    answers["/api/v1/me/submissions/s1/events"] = send(200, b"event: done\ndata: {}\n\n")
    answers["/api/v1/me/submissions/s1"] = send(
        200, json.dumps({"id": "s1", "exercise": "x", "status": "graded", "checks": []}).encode()
    )
    code = tmp_path / "step.py"
    code.write_text(CORRECT_CODE)
    config = login_file(tmp_path, url)
    result = run(installed_client, config, "submit", str(code), "--exercise", "x")
    assert len(keys) == 3, result.stderr
    assert keys[0] and len(set(keys)) == 1  # one submission, however many tries
    assert "busy" not in result.stderr
