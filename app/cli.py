"""The `loopgrade` command: serve, migrate, keys create, grade, check-exercises.

Each command imports what it needs: `keys` and `migrate` should not pay for importing torch.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from app.settings import Settings

log = logging.getLogger("loopgrade")


def build_settings(args: argparse.Namespace) -> Settings:
    """Settings from the environment; `--data-dir` wins over LOOPGRADE_DATA_DIR."""
    data_dir: Path | None = getattr(args, "data_dir", None)
    return Settings(data_dir=data_dir) if data_dir is not None else Settings()


def migrate_database(settings: Settings) -> None:
    from app.db import upgrade_database

    revision = upgrade_database(settings.database_url)
    shown_url = make_url(settings.database_url).render_as_string(hide_password=True)
    log.info("database %s is at migration %s", shown_url, revision)


def cmd_serve(args: argparse.Namespace) -> int:
    import sandbox

    settings = build_settings(args)
    try:
        sandbox.check_available()
    except sandbox.SandboxUnavailable as exc:
        print(
            f"loopgrade: refusing to start: {exc}\n"
            "(loopgrade never runs learner code outside a sandbox.)",
            file=sys.stderr,
        )
        return 1
    log.info("sandbox backend: %s", sandbox.backend_name())
    migrate_database(settings)

    import uvicorn

    from app.main import create_app

    log.info("data directory: %s; %d grading workers", settings.data_dir, settings.worker_count)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    migrate_database(build_settings(args))
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    from app.auth import create_api_key
    from app.db import create_db_engine, create_session_factory

    settings = build_settings(args)
    migrate_database(settings)
    engine = create_db_engine(settings.database_url)
    try:
        with create_session_factory(engine).begin() as session:
            api_key, secret = create_api_key(session, name=args.name)
    finally:
        engine.dispose()
    print(
        f"Created API key {api_key.name!r} (id {api_key.id}). It is shown only this once; "
        "only its hash is stored. Use it as 'Authorization: Bearer <key>'.",
        file=sys.stderr,
    )
    print(secret)
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    from graders.cli import grade_file

    return grade_file(args.file, args.exercise, args.json)


def cmd_check_exercises(args: argparse.Namespace) -> int:
    from graders.cli import check_exercises

    return check_exercises()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopgrade", description="Auto-graded exercises for PyTorch training loops."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_data_dir(command: argparse.ArgumentParser) -> None:
        command.add_argument(
            "--data-dir",
            type=Path,
            help="where the database lives (default: $LOOPGRADE_DATA_DIR, or ./data)",
        )

    serve = commands.add_parser(
        "serve", help="apply migrations, check the sandbox, serve the web app and API"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    add_data_dir(serve)
    serve.set_defaults(run=cmd_serve)

    migrate = commands.add_parser("migrate", help="apply database migrations")
    add_data_dir(migrate)
    migrate.set_defaults(run=cmd_migrate)

    keys = commands.add_parser("keys", help="manage REST API keys")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="COMMAND")
    keys_create = keys_commands.add_parser(
        "create", help="create an API key; prints it once, on the last line"
    )
    keys_create.add_argument("name", help="who the key is for, e.g. 'canvas-prod'")
    add_data_dir(keys_create)
    keys_create.set_defaults(run=cmd_keys_create)

    grade = commands.add_parser("grade", help="grade a file locally, without a server")
    grade.add_argument(
        "file", type=Path, help="a .py file (or .ipynb notebook) defining the exercise's function"
    )
    grade.add_argument("--exercise", required=True, help="exercise id, e.g. train-step")
    grade.add_argument("--json", action="store_true", help="print the report as JSON")
    grade.set_defaults(run=cmd_grade)

    check = commands.add_parser(
        "check-exercises",
        help="prove every exercise sound: the reference scores full, the starter does not, "
        "every known bug gets its diagnosis",
    )
    check.set_defaults(run=cmd_check_exercises)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    try:
        exit_code: int = args.run(args)
    except ValidationError as exc:
        print(f"loopgrade: a LOOPGRADE_* setting is invalid: {exc}", file=sys.stderr)
        return 2
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
