"""The client against a real `loopgrade serve`: the wheel built from client/, installed into a
directory of its own, and a server with two learners who each have a personal token."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.db import create_db_engine, create_session_factory
from app.models import SiteRole
from app.people.accounts import create_user
from app.people.tokens import create_personal_token
from tests.conftest import ScopeDatabase
from tests.servers import REPO, running_server


@dataclass(frozen=True)
class Installed:
    """The client's wheel and where it is installed (`--target`), as pip would for a learner."""

    wheel: Path
    target: Path

    def env(self, config: Path) -> dict[str, str]:
        """An environment that finds the installed client (not the checkout) and `config`."""
        return {
            **os.environ,
            "PYTHONPATH": str(self.target),
            "LOOPGRADE_CLIENT_CONFIG": str(config),
        }


@pytest.fixture(scope="session")
def installed_client(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """`pip wheel ./client` then `pip install` of that wheel: no server package comes along."""
    build = tmp_path_factory.mktemp("client-wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(build),
            str(REPO / "client"),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = build.glob("loopgrade_client-*.whl")
    target = build / "site"
    # --no-deps: httpx is the one dependency, and this venv has it already.
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return Installed(wheel, target)


@dataclass(frozen=True)
class Server:
    url: str
    tokens: dict[str, str]  # a learner's email: their token
    database_url: str


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, scope_database: ScopeDatabase
) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("client-server") / "data"
    data_dir.mkdir()
    with scope_database(data_dir) as database_url:
        sessions = create_session_factory(create_db_engine(database_url))
        tokens = {}
        with sessions.begin() as session:
            for email in ("ben@example.org", "cat@example.org"):
                user = create_user(
                    session,
                    email=email,
                    name=email[:3].title(),
                    password="correct horse battery",
                    site_role=SiteRole.LEARNER,
                )
                _, tokens[email] = create_personal_token(
                    session, user, name="laptop", lifetime_days=30, max_days=365
                )
        env = {
            **os.environ,
            "LOOPGRADE_DATABASE_URL": database_url,
            "LOOPGRADE_SANDBOX_POOL_SIZE": "0",
        }
        log_path = data_dir.parent / "server.log"
        with running_server(data_dir, log_path, env) as (_, url):
            yield Server(url, tokens, database_url)
