"""The database under every test: a SQLite file (default) or PostgreSQL.

LOOPGRADE_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:PORT/postgres (a server where the
tests may create databases; .ci/run starts one) runs the tests on PostgreSQL: the session
migrates a template database once, and each test gets a database of its own, empty, named by
LOOPGRADE_DATABASE_URL for the test and every process it starts. `migrated_database` fills it
from the template (as fast as a copy), or migrates the SQLite file. A server that outlives one
test (a module's or the session's) cannot use that database, dropped after the test: its
fixture takes one of its own from `scope_database`.

Tests of many hosts need PostgreSQL whatever the mode: `postgres_admin_url` is the server of
LOOPGRADE_TEST_DATABASE_URL or LOOPGRADE_TEST_POSTGRES_URL (./dev test and .ci/run start one
with scripts/test-services.sh), else a throwaway cluster of the session's own.
LOOPGRADE_REQUIRE_SERVICES=1 (as in CI) makes a missing PostgreSQL or Redis an error, not a skip.

An app this process serves with `sandbox_pool_size=0` grades through one warm bubblewrap pool
the session shares (`shared_warm_pool`), not a cold sandbox per run: a cold run starts Python and
torch afresh (seconds of CPU), and a pool per app would start its zygotes per test. Each cold
backend is held to its caps in tests/sandbox and tests/hostile; a test about the cold runner
itself is marked `cold_sandbox`.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from argon2 import PasswordHasher

import app.main
import sandbox
from app.db import upgrade_database
from app.grading.queue import open_grading_runner as open_grading_runner_of_settings
from app.people import accounts
from app.reactions import install_reactions
from app.settings import Settings, sqlite_database_url, with_psycopg_driver
from graders.exercises import list_exercises
from graders.grading import POOL_PROGRAM, install_diagnoses
from tests.services import (
    create_database,
    drop_database,
    postgres_bin,
    postgres_server,
    redis_binary,
)

# Tests store grades by calling the grading functions in this process, as the server does,
# and read their diagnoses' words without loading an exercise first.
install_reactions()
install_diagnoses()

# Passwords are hashed in the test process with argon2's cheapest parameters: the product's
# cost about 0.2 CPU s a hash and as much a check, and the suite signs people up and in
# thousands of times. The hash is argon2id all the same, a check reads the parameters from the
# hash it checks, and a server process a test starts hashes with the product's own parameters
# (`PRODUCT_PASSWORD_HASHER`, held to argon2's defaults by tests/app/test_accounts.py).
PRODUCT_PASSWORD_HASHER = accounts._hasher
accounts._hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)

# The exercises' proofs (graders/proving.py), kept for every test process and every server a
# test starts, run after run: a proof is named by all it depends on (the folder, the grader's
# code, torch), so a kept one is as good as a new one, and each folder is proven once, not
# once per process (some seconds each).
os.environ.setdefault(
    "LOOPGRADE_PROOF_CACHE_DIR", str(Path(tempfile.gettempdir()) / "loopgrade-test-proofs")
)
# Proven now, before any test starts a server, whose start reads the proofs: after a change of
# the grader's code every exercise is proven afresh, for longer than a test server may take
# to start on a loaded machine.
list_exercises()

TEST_DATABASE_URL = with_psycopg_driver(os.environ.get("LOOPGRADE_TEST_DATABASE_URL", ""))
REQUIRE_SERVICES = bool(os.environ.get("LOOPGRADE_REQUIRE_SERVICES"))
TEMPLATE_DATABASE = f"loopgrade_template_{os.getpid()}"
_database_numbers = itertools.count()


def migrated_database(database_url: str) -> None:
    """Bring the test's database to the newest migration: a copy of one migrated the first time
    (a template database on PostgreSQL, a file on SQLite), not every migration run again."""
    if TEST_DATABASE_URL and database_url == os.environ.get("LOOPGRADE_DATABASE_URL"):
        name = database_url.rsplit("/", 1)[1]
        drop_database(TEST_DATABASE_URL, name)
        create_database(TEST_DATABASE_URL, name, template=TEMPLATE_DATABASE)
    elif database_url.startswith(SQLITE_URL_PREFIX):
        target = Path(database_url.removeprefix(SQLITE_URL_PREFIX))
        target.parent.mkdir(parents=True, exist_ok=True)
        with (
            contextlib.closing(sqlite3.connect(migrated_sqlite_file())) as source,
            contextlib.closing(sqlite3.connect(target)) as copy,
        ):
            source.backup(copy)
    else:
        upgrade_database(database_url)


SQLITE_URL_PREFIX = "sqlite:///"


@functools.cache
def migrated_sqlite_file() -> Path:
    """A SQLite database at the newest migration, made once a process, removed at its exit."""
    folder = Path(tempfile.mkdtemp(prefix="loopgrade-migrated-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    upgrade_database(SQLITE_URL_PREFIX + str(folder / "migrated.db"))
    return folder / "migrated.db"


def missing_service(message: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} (LOOPGRADE_REQUIRE_SERVICES is set)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[None]:
    """The migrated template database of this session (PostgreSQL mode only)."""
    if not TEST_DATABASE_URL:
        yield
        return
    drop_database(TEST_DATABASE_URL, TEMPLATE_DATABASE)
    upgrade_database(create_database(TEST_DATABASE_URL, TEMPLATE_DATABASE))
    yield
    drop_database(TEST_DATABASE_URL, TEMPLATE_DATABASE)


@pytest.fixture(autouse=True)
def test_database(postgres_template: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str | None]:
    """In PostgreSQL mode, an empty database of this test's own as LOOPGRADE_DATABASE_URL."""
    if not TEST_DATABASE_URL:
        yield None
        return
    name = f"loopgrade_test_{os.getpid()}_{next(_database_numbers)}"
    url = create_database(TEST_DATABASE_URL, name)
    monkeypatch.setenv("LOOPGRADE_DATABASE_URL", url)
    yield url
    drop_database(TEST_DATABASE_URL, name)


ScopeDatabase = Callable[[Path], AbstractContextManager[str]]


@pytest.fixture(scope="session")
def scope_database(postgres_template: None) -> ScopeDatabase:
    """`with scope_database(data_dir) as url:` a migrated database for a fixture wider than one
    test, until the block ends: on PostgreSQL a copy of the template of its own, dropped at
    the end; on SQLite the data directory's file. Give the URL to the server explicitly
    (`Settings(database_url=...)`, LOOPGRADE_DATABASE_URL in a process's environment) and to
    the commands a test runs against that server: LOOPGRADE_DATABASE_URL in the environment
    names the current test's database, made after a wider fixture's and dropped before the
    next test."""

    @contextmanager
    def database(data_dir: Path) -> Iterator[str]:
        if not TEST_DATABASE_URL:
            url = sqlite_database_url(data_dir)
            upgrade_database(url)
            yield url
            return
        name = f"loopgrade_scope_{os.getpid()}_{next(_database_numbers)}"
        url = create_database(TEST_DATABASE_URL, name, template=TEMPLATE_DATABASE)
        try:
            yield url
        finally:
            drop_database(TEST_DATABASE_URL, name)

    return database


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """A PostgreSQL server the test may create databases on (the given one, or our own)."""
    given = TEST_DATABASE_URL or os.environ.get("LOOPGRADE_TEST_POSTGRES_URL")
    if given:
        yield with_psycopg_driver(given)
        return
    if postgres_bin() is None:
        missing_service("PostgreSQL is not installed: apt-get install postgresql (./dev does)")
    with postgres_server() as server:
        yield server.url


@pytest.fixture(scope="session")
def redis_available() -> None:
    if redis_binary() is None:
        missing_service("redis-server is not installed: apt-get install redis-server")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other uids can read (pytest's tmp_path is under a mode-700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="loopgrade-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


class SharedWarmPool:
    """A warm pool of two slots on the `auto` backend, started on first use, closed at the end."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runner: sandbox.Runner | None = None

    def get(self) -> sandbox.Runner:
        with self.lock:  # apps start in threads of their own
            if self.runner is None:
                self.runner = sandbox.open_runner("auto", pool=POOL_PROGRAM, pool_size=2)
            return self.runner

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()


class BorrowedRunner:
    """The shared pool as one app's runner: the app's close() leaves it to the next app."""

    def __init__(self, runner: sandbox.Runner) -> None:
        self.runner = runner

    @property
    def name(self) -> str:
        return self.runner.name

    @property
    def status(self) -> str:
        return self.runner.status

    def run(
        self,
        program: str,
        inputs: Mapping[str, bytes],
        limits: sandbox.Limits,
        later_input: bytes | None = None,
    ) -> sandbox.RunResult:
        return self.runner.run(program, inputs, limits, later_input)

    def close(self) -> None:
        pass


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cold_sandbox: the apps this test serves grade cold, as their settings say"
    )
    config.addinivalue_line(
        "markers",
        "no_database: opens no database (a command on folders or files alone, a refused start):"
        " run on SQLite only, as the suites that open none (.ci/run)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On PostgreSQL, a test that opens no database would prove what its SQLite run proves."""
    if not TEST_DATABASE_URL:
        return
    skip = pytest.mark.skip(reason="opens no database: its run on SQLite proves as much")
    for item in items:
        if item.get_closest_marker("no_database") is not None:
            item.add_marker(skip)


# The suites whose apps, served in the test process, grade in it (tests/hosts' apps hand their
# gradings to Celery workers).
SUITES_SERVING_APPS = ("app", "lti", "browser")
_cold_wanted = threading.Event()  # set during a test marked cold_sandbox


@pytest.fixture(scope="session", autouse=True)
def shared_warm_pool(request: pytest.FixtureRequest) -> Iterator[SharedWarmPool]:
    """Apps served in this process with no pool of their own grade through this one. It starts
    before the first test when the session holds tests that serve apps: starting it inside an
    app's start-up would hold that start-up for the seconds its zygotes take."""
    shared = SharedWarmPool()
    serving = [Path(__file__).parent / suite for suite in SUITES_SERVING_APPS]
    if any(item.path.is_relative_to(suite) for item in request.session.items for suite in serving):
        shared.get()
    open_own_runner = open_grading_runner_of_settings

    def open_grading_runner(settings: Settings) -> sandbox.Runner:
        if settings.sandbox_pool_size or settings.sandbox != "auto" or _cold_wanted.is_set():
            return open_own_runner(settings)
        return BorrowedRunner(shared.get())

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app.main, "open_grading_runner", open_grading_runner)
        yield shared
    shared.close()


@pytest.fixture(autouse=True)
def cold_sandbox_if_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("cold_sandbox") is None:
        yield
        return
    _cold_wanted.set()
    yield
    _cold_wanted.clear()
