"""Fixtures for the app: a migrated database (tests/conftest.py), a real server over HTTP."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import httpx
import pytest

import app.cli
from app.api_keys import create_api_key
from app.db import SessionFactory, create_db_engine, create_session_factory
from app.main import create_app
from app.settings import Settings
from tests.conftest import migrated_database
from tests.servers import HTTP_TIMEOUT_SECONDS, app_in_thread

REPO = Path(__file__).resolve().parents[2]
EXERCISE = "train-step"
CORRECT_CODE = (REPO / "exercises" / EXERCISE / "solution.py").read_text()
# The lesson's first mistake: gradients from earlier batches pile up in .grad.
MISSING_ZERO_GRAD_CODE = """\
def train_step(model, optimizer, loss_fn, x, y):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
"""
# Grading runs torch in bubblewrap on a small machine, and a few may be queued.
GRADING_TIMEOUT_SECONDS = 120.0


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings for a fresh data dir whose database has every migration applied."""
    # No pool of its own: a server per test would start one per test (seconds each). Its
    # app grades through the session's shared warm pool (tests/conftest.py).
    settings = Settings(data_dir=tmp_path / "data", sandbox_pool_size=0)
    migrated_database(settings.database_url)
    return settings


@pytest.fixture
def sessions(settings: Settings) -> Iterator[SessionFactory]:
    """Sessions on the test database, separate from the server's own connections."""
    engine = create_db_engine(settings.database_url)
    yield create_session_factory(engine)
    engine.dispose()


@pytest.fixture
def api_key(sessions: SessionFactory) -> str:
    with sessions.begin() as session:
        _, secret = create_api_key(session, name="tests")
    return secret


@pytest.fixture
def auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


@pytest.fixture
def server_url(settings: Settings) -> Iterator[str]:
    """The app served by uvicorn on a free 127.0.0.1 port, in a thread of this process."""
    with app_in_thread(create_app(settings)) as url:
        yield url


@pytest.fixture
def client(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=HTTP_TIMEOUT_SECONDS) as client:
        yield client


@pytest.fixture
def proxied_settings(settings: Settings) -> Settings:
    """Settings of a server behind a reverse proxy on 127.0.0.1, whose X-Forwarded-* it believes
    (so a test names any client address in X-Forwarded-For)."""
    return settings.model_copy(update={"trusted_proxies": "127.0.0.1"})


@pytest.fixture
def proxied_client(proxied_settings: Settings) -> Iterator[httpx.Client]:
    with (
        app_in_thread(create_app(proxied_settings)) as url,
        httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECONDS) as client,
    ):
        yield client


def wait_until_finished(
    client: httpx.Client, url: str, headers: dict[str, str], *, statuses: tuple[str, ...]
) -> dict[str, Any]:
    """Poll a submission until its status is one of `statuses`; return its JSON."""
    deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
    while True:
        response = client.get(url, headers=headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if body["status"] in statuses:
            return body
        assert time.monotonic() < deadline, f"still {body['status']} after the timeout"
        time.sleep(0.1)


def command_environment(data_dir: Path | None, env: dict[str, str] | None) -> dict[str, str]:
    """What a `loopgrade` command's environment has over this process's."""
    changes = dict(env or {})
    if data_dir is not None:
        changes["LOOPGRADE_DATA_DIR"] = str(data_dir)
    return changes


def loopgrade(
    *args: str,
    data_dir: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a `loopgrade` command in this process (`app.cli.main`), as the command would run:
    its environment (`env` over this process's), its stdout, stderr and exit status. A process
    of its own would start Python and import the app afresh, seconds per command; commands
    about the process itself (serve's sockets) use `loopgrade_process`."""
    stdout, stderr = io.StringIO(), io.StringIO()
    # A root logger with no handler, as in a new process: the command's configure_logging()
    # then logs to its stderr here (pytest's own handlers come back after).
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers.clear()
    try:
        with (
            pytest.MonkeyPatch.context() as patch,
            redirect_stdout(stdout),
            redirect_stderr(stderr),
        ):
            for name, value in command_environment(data_dir, env).items():
                patch.setenv(name, value)
            try:
                returncode = app.cli.main(list(args))
            except SystemExit as exit:  # argparse's errors, a command's exit
                returncode = exit.code if isinstance(exit.code, int) else int(bool(exit.code))
                if isinstance(exit.code, str):
                    print(exit.code, file=sys.stderr)
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
    return subprocess.CompletedProcess(
        ["loopgrade", *args], returncode, stdout.getvalue(), stderr.getvalue()
    )


def loopgrade_process(
    *args: str, data_dir: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the `loopgrade` command in a process of its own (as `python -m app.cli`)."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=REPO,
        env={**os.environ, **command_environment(data_dir, env)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def csrf_token(client: httpx.Client, path: str) -> str:
    """The CSRF token of the first form on the page at `path` (its cookie lands in `client`)."""
    page = client.get(path)
    assert page.status_code == 200, page.text
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match, f"no form with a CSRF token at {path}"
    return match[1]
