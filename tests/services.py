"""Real PostgreSQL and Redis servers for tests, each its own process on a free loopback port.

Debian's `postgresql` and `redis-server` packages provide the binaries (./dev installs them).
PostgreSQL refuses to run as root, so as root its cluster belongs to the `postgres` user.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg

from tests.servers import free_port

POSTGRES_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def postgres_bin() -> Path | None:
    """The directory of initdb and pg_ctl (the newest installed major version), or None."""
    for directory in POSTGRES_BIN_DIRS:
        if (directory / "pg_ctl").exists():
            return directory
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def redis_binary() -> str | None:
    return shutil.which("redis-server")


class PostgresServer:
    """A throwaway PostgreSQL cluster: `start()`, `stop()` (fast, like a crash), `url`.

    A commit survives `stop()` (a crash of the server, not of the machine), as in production.
    """

    def __init__(self) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL here: apt-get install postgresql (./dev does)")
        self._bin = bin_dir
        # Under /tmp, not pytest's private tmp_path: the `postgres` user must reach it.
        self.directory = Path(tempfile.mkdtemp(prefix="loopgrade-pg-"))
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._as_owner: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres")
            self._as_owner = ["runuser", "-u", "postgres", "--"]
        self._run(
            "initdb",
            "--pgdata",
            str(self.directory / "data"),
            "--username=postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            [*self._as_owner, str(self._bin / program), *args],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.directory} "
            # Test data: no need to survive a power cut, and much faster without. But
            # synchronous_commit stays on: `stop()` is a crash, and with it off a commit is
            # acknowledged before its WAL leaves the server's memory, so a crash lost rows
            # the client had been told were stored (the outage test's API key and
            # submission: every request after the restart was a 401 or a 404).
            "-c fsync=off -c full_page_writes=off "
            "-c max_connections=300"
        )
        self._run(
            "pg_ctl",
            "--pgdata",
            str(self.directory / "data"),
            "--log",
            str(self.directory / "server.log"),
            "--options",
            options,
            "--wait",
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "--pgdata", str(self.directory / "data"), "--mode=immediate", "stop")

    def remove(self) -> None:
        with suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


class RedisServer:
    """A Redis server without persistence (a restart loses every message): `url`, `restart()`."""

    def __init__(self, directory: Path) -> None:
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("no redis-server here: apt-get install redis-server (./dev does)")
        self._binary = binary
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with (self.directory / "redis.log").open("ab") as log:
            self._process = subprocess.Popen(
                [
                    self._binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.directory),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while not self.answers():
            assert self._process.poll() is None, (self.directory / "redis.log").read_text()
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        """Like a crash: SIGKILL, and whatever it held in memory is gone."""
        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait()
            self._process = None


@contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(directory)
    try:
        server.start()
        yield server
    finally:
        server.kill()


def create_database(admin_url: str, name: str, *, template: str | None = None) -> str:
    """Create database `name` on the server of `admin_url`; return its SQLAlchemy URL."""
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as connection:
        template_clause = f' TEMPLATE "{template}"' if template else ""
        connection.execute(f'CREATE DATABASE "{name}"{template_clause}')
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def libpq_url(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as libpq (psycopg.connect) takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)
