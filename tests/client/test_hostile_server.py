"""The client against a fake server on loopback that answers what loopgrade never would:
garbage, huge bodies, wrong types, endless event lines, 429 and 503 with Retry-After. Each is
one sentence and exit status 2, never a traceback or a hang."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.app.conftest import CORRECT_CODE
from tests.client.conftest import Installed
from tests.client.test_commands import run

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
