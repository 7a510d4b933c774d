"""Servers for tests: `loopgrade serve` as a real process, or the app in a thread, on free ports."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.admission import uvicorn_config
from app.progress import StreamClosingServer

REPO = Path(__file__).resolve().parents[1]
# How long a test's HTTP client waits for an answer: as patient as a browser. httpx's own
# default (5 s) is shorter than a page can take on a loaded machine, which is not a failure.
HTTP_TIMEOUT_SECONDS = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until_ready(url: str, seconds: float = 120) -> httpx.Response:
    """/readyz's 200, as a load balancer waits for it: a server is ready only once its trusted
    trajectories are computed, seconds after it answers."""
    deadline = time.monotonic() + seconds
    while (ready := httpx.get(f"{url}/readyz", timeout=HTTP_TIMEOUT_SECONDS)).status_code != 200:
        assert time.monotonic() < deadline, ready.text
        time.sleep(0.1)
    return ready


@contextmanager
def running_server(
    data_dir: Path,
    log_path: Path,
    env: dict[str, str] | None = None,
    startup_seconds: float = 90,
    checkout: Path = REPO,
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`loopgrade serve` in its own process group; yields it and its URL once it answers.

    `checkout`: the tree whose code it serves (bench/request_cpu.py serves another revision's).

    Its port is bound here and handed over (`--fd`): a port only probed as free could be taken
    by another process (another test run beside this one) before the server binds it, and the
    readiness check below would then be answered by someone else's server.
    """
    command = [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(data_dir)]
    with socket.socket() as listener, log_path.open("ab") as log:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        server = subprocess.Popen(
            [*command, "--fd", str(listener.fileno())],
            cwd=checkout,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=[listener.fileno()],
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_seconds
        while True:
            assert server.poll() is None, f"server exited: {log_path.read_text()}"
            assert time.monotonic() < deadline, f"server not up: {log_path.read_text()}"
            try:
                if httpx.get(f"{url}/api/v1/exercises", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield server, url
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
        # Anything the server left behind in its group (a sandbox, say) goes with it.
        with suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@contextmanager
def app_in_thread(app: Any) -> Iterator[str]:
    """An ASGI app served by uvicorn on a free 127.0.0.1 port in a thread; yields its URL."""
    with uvicorn_in_thread(app) as (_, _, url):
        yield url


@contextmanager
def uvicorn_in_thread(app: Any) -> Iterator[tuple[StreamClosingServer, threading.Thread, str]]:
    """`app_in_thread`, yielding the server and its thread too (to stop it and see it end)."""
    listener = socket.socket()  # bound here, so no other process can take the port first
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    # As `loopgrade serve` runs it: proxy headers are the app's to believe (trusted_proxies).
    server = StreamClosingServer(uvicorn_config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield server, thread, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=120)
        listener.close()


@dataclass(frozen=True)
class RawAnswer:
    """An HTTP answer as read off the socket by `request_on_own_connection`."""

    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def raw_request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """An HTTP/1.1 request's bytes, as a client sends them."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode() + body


def parse_answer(raw: bytes) -> RawAnswer:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawAnswer(int(status_line.split()[1]), headers, body)


async def request_on_own_connection(port: int, request: bytes) -> RawAnswer:
    """One request on a new connection, read until the server closes it: as a browser, an
    LMS's worker or a curl loop sends it. (Send `Connection: close`.) Lean on purpose: a
    thousand of them share the cores with the server they load."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return parse_answer(await reader.read())
    finally:
        writer.close()
