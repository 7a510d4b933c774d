"""The `loopgrade` command: serve, worker, migrate, users, courses, keys, regrade, grade,
check-exercises, exercises.

One idea over 400 lines: the command's parser and its subcommands, each a thin call of the
domain.

Each command imports what it needs: `keys` and `migrate` should not pay for importing torch.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from app.backup_commands import add_backup_commands
from app.cli_support import (
    CommandFailed,
    build_settings,
    check_tool_keys,
    database_session,
    migrate_database,
)
from app.data_dir import DataDirInUse, hold_serve_lock
from app.exercise_commands import add_course_exercises_command, add_exercise_commands
from app.lti.cli import add_lti_commands
from app.models import SiteRole
from app.operations import configure_logging

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.models import User

log = logging.getLogger("loopgrade")


def check_sandbox() -> bool:
    """Whether this host has a working sandbox; says why not on stderr."""
    import sandbox

    try:
        sandbox.check_available()
    except sandbox.SandboxUnavailable as exc:
        print(
            f"loopgrade: refusing to start: {exc}\n"
            "(loopgrade never runs learner code outside a sandbox.)",
            file=sys.stderr,
        )
        return False
    log.info("sandbox backend: %s", sandbox.backend_name())
    return True


def cmd_serve(args: argparse.Namespace) -> int:
    sockets = None if args.fd is None else [inherited_socket(args.fd)]
    settings = build_settings(args)
    from app.hosts import public_url_problem

    if problem := public_url_problem(settings):
        raise CommandFailed(problem)
    # With a broker the workers grade; an API host without a sandbox is fine then.
    if not settings.broker_url and not check_sandbox():
        return 1
    serve_lock = hold_serve_lock(settings)  # held while this process lives
    migrate_database(settings, copy_first=not args.no_copy_before_upgrade)
    check_tool_keys(settings)

    from app.admission import uvicorn_config
    from app.main import create_app
    from app.progress import StreamClosingServer

    log.info("data directory: %s; %d grading workers", settings.data_dir, settings.worker_count)
    # The app's progress streams end when shutdown begins, not when each one times out.
    config = uvicorn_config(create_app(settings), host=args.host, port=args.port, log_level="info")
    StreamClosingServer(config).run(sockets=sockets)
    if serve_lock is not None:
        serve_lock.close()
    return 0


def inherited_socket(fd: int) -> socket.socket:
    """The listening socket `--fd` names, its family read from it (uvicorn's own `fd` option
    takes every socket for a Unix one, and would misread the clients' TCP addresses)."""
    try:
        listener = socket.socket(fileno=fd)
    except OSError as exc:
        raise CommandFailed(f"--fd {fd} is not a socket this process inherited: {exc}") from None
    if listener.type != socket.SOCK_STREAM:
        raise CommandFailed(f"--fd {fd} is not a stream socket")
    return listener


def cmd_worker(args: argparse.Namespace) -> int:
    settings = build_settings(args)
    if not settings.broker_url:
        raise CommandFailed(
            "LOOPGRADE_BROKER_URL is not set: without a broker 'loopgrade serve' grades in "
            "its own threads (set it to redis://HOST:6379/0 for separate workers)"
        )
    if not check_sandbox():
        return 1
    from app.grading.celery_queue import run_worker

    log.info(
        "worker: %d grading threads on queue %r; database %s",
        settings.worker_count,
        settings.worker_queue,
        make_url(settings.database_url).render_as_string(hide_password=True),
    )
    return run_worker(settings)


def cmd_migrate(args: argparse.Namespace) -> int:
    migrate_database(build_settings(args), copy_first=not args.no_copy_before_upgrade)
    return 0


def cmd_keys_create(args: argparse.Namespace) -> int:
    from app.api_keys import create_api_key
    from app.courses.membership import find_course

    with database_session(build_settings(args)) as session:
        course_id, course_name = None, ""
        if args.course is not None:
            course = find_course(session, args.course)
            if course is None:
                raise CommandFailed(
                    f"no course has the id or join code {args.course!r} "
                    "(see 'loopgrade courses list')"
                )
            course_id, course_name = course.id, course.name
        api_key, secret = create_api_key(session, name=args.name, course_id=course_id)
        scope = (
            f"for course {course_name!r}: it submits into it and reads only its submissions "
            "and gradebook"
            if course_id
            else "tied to no course: it reads only submissions made without a course "
            "(use --course to give a course's LMS a key)"
        )
    print(
        f"Created API key {api_key.name!r} (id {api_key.id}) {scope}. It is shown only this "
        "once; only its hash is stored. Use it as 'Authorization: Bearer <key>'.",
        file=sys.stderr,
    )
    print(secret)
    return 0


def _course_of(session: Session, id_or_join_code: str) -> tuple[str, str]:
    from app.courses.membership import find_course

    course = find_course(session, id_or_join_code)
    if course is None:
        raise CommandFailed(
            f"no course has the id or join code {id_or_join_code!r} (see 'loopgrade courses list')"
        )
    return course.id, course.name


def cmd_keys_list(args: argparse.Namespace) -> int:
    from app.api_keys import keys_of_course

    with database_session(build_settings(args)) as session:
        course_id = _course_of(session, args.course)[0] if args.course else None
        for api_key in keys_of_course(session, course_id):
            state = f"revoked {api_key.revoked_at:%Y-%m-%d %H:%M}" if api_key.revoked_at else "live"
            print(f"{api_key.id}  {api_key.name}  created {api_key.created_at:%Y-%m-%d}  {state}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    from app.api_keys import revoke_api_key
    from app.models import ApiKey

    with database_session(build_settings(args)) as session:
        api_key = session.get(ApiKey, args.key_id)
        if api_key is None:
            raise CommandFailed(
                f"no API key has the id {args.key_id!r} (see 'loopgrade keys list')"
            )
        revoke_api_key(session, api_key)
        name = api_key.name
    print(f"Revoked API key {name!r} ({args.key_id}): it is refused from now on.")
    return 0


def read_password() -> str:
    """LOOPGRADE_PASSWORD, or typed twice at a prompt (never an argument: ps would show it)."""
    password = os.environ.get("LOOPGRADE_PASSWORD")
    if password:
        return password
    if not sys.stdin.isatty():
        raise CommandFailed("set LOOPGRADE_PASSWORD, or run this in a terminal to be asked")
    password = getpass.getpass("Password: ")
    if getpass.getpass("Again: ") != password:
        raise CommandFailed("the two passwords differ")
    return password


def cmd_users_create(args: argparse.Namespace) -> int:
    from app.models import SiteRole
    from app.people.accounts import AccountError, create_user

    settings = build_settings(args)
    password = read_password()
    try:
        with database_session(settings) as session:
            user = create_user(
                session,
                email=args.email,
                name=args.name or "",
                password=password,
                site_role=SiteRole(args.role),
            )
            summary = f"{user.email} ({user.site_role}, id {user.id})"
    except AccountError as exc:
        raise CommandFailed(str(exc)) from None
    print(f"Created user {summary}.")
    return 0


def _user_by_email(session: Session, email: str) -> User:
    from app.people.accounts import find_user_by_email

    user = find_user_by_email(session, email)
    if user is None:
        raise CommandFailed(f"no account has the email {email!r}")
    return user


def cmd_users_reset_password(args: argparse.Namespace) -> int:
    from app.people.accounts import AccountError, end_sessions, set_password
    from app.people.recovery import issue_reset_link, reset_url

    settings = build_settings(args)
    password = read_password() if args.set else None
    try:
        with database_session(settings) as session:
            user = _user_by_email(session, args.email)
            if password is None:
                link = issue_reset_link(
                    session,
                    user,
                    client_address="cli",
                    max_age_seconds=settings.password_reset_max_age_seconds,
                )
                url = reset_url(settings.public_url or "http://127.0.0.1:8000", link.token)
            else:
                set_password(session, user, password)
                ended = end_sessions(session, user)
    except AccountError as exc:
        raise CommandFailed(str(exc)) from None
    if password is not None:
        print(f"Set the password of {args.email}; {ended} sessions ended.")
        return 0
    minutes = settings.password_reset_max_age_seconds // 60
    where = "" if settings.public_url else " (LOOPGRADE_PUBLIC_URL is not set: fix the address)"
    print(
        f"A reset link for {args.email}, working once within {minutes} minutes{where}:",
        file=sys.stderr,
    )
    print(url)
    return 0


def cmd_users_disable(args: argparse.Namespace) -> int:
    from app.audit import AuditAction, record_event
    from app.people.accounts import disable_user, enable_user

    with database_session(build_settings(args)) as session:
        user = _user_by_email(session, args.email)
        if args.users_command == "disable":
            ended = disable_user(session, user)
            record_event(session, actor=None, action=AuditAction.ACCOUNT_DISABLED, email=user.email)
            said = f"Disabled {user.email}: it cannot sign in; {ended} sessions ended."
        else:
            enable_user(session, user)
            record_event(session, actor=None, action=AuditAction.ACCOUNT_ENABLED, email=user.email)
            said = f"Enabled {user.email}: it can sign in again."
    print(said)
    return 0


def cmd_users_set_role(args: argparse.Namespace) -> int:
    from app.audit import AuditAction, record_event

    with database_session(build_settings(args)) as session:
        user = _user_by_email(session, args.email)
        old_role, user.site_role = user.site_role, args.role
        record_event(
            session,
            actor=None,
            action=AuditAction.SITE_ROLE_CHANGED,
            email=user.email,
            old_role=old_role,
            new_role=args.role,
        )
    print(f"{args.email}: {old_role} -> {args.role}.")
    return 0


class _DryRun(Exception):
    """Raised to roll a dry run's transaction back once its report is printed."""


def cmd_users_merge(args: argparse.Namespace) -> int:
    from app.people.accounts import AccountError
    from app.people.merging import merge_accounts

    try:
        with database_session(build_settings(args)) as session:
            keep = _user_by_email(session, args.keep)
            duplicate = _user_by_email(session, args.duplicate)
            report = merge_accounts(session, keep=keep, duplicate=duplicate)
            verb = "Merged" if args.apply else "Dry run (nothing changed; --apply to merge)"
            print(f"{verb}: {args.duplicate} into {args.keep}:")
            for line in report.lines():
                print(f"  {line}")
            if not args.apply:
                raise _DryRun()
    except _DryRun:
        return 0
    except AccountError as exc:
        raise CommandFailed(str(exc)) from None
    return 0


def cmd_users_list(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from app.models import User

    with database_session(build_settings(args)) as session:
        for user in session.scalars(select(User).order_by(User.email)):
            state = f"disabled {user.disabled_at:%Y-%m-%d}" if user.disabled_at else "enabled"
            print(f"{user.email}  {user.site_role}  {state}  {user.name}")
    return 0


def cmd_courses_create(args: argparse.Namespace) -> int:
    from app.courses.membership import CourseError, create_course
    from app.people.accounts import find_user_by_email

    try:
        with database_session(build_settings(args)) as session:
            instructor = find_user_by_email(session, args.instructor)
            if instructor is None:
                raise CommandFailed(
                    f"no user has the email {args.instructor!r}: "
                    "create one with 'loopgrade users create EMAIL --role instructor'"
                )
            course = create_course(session, name=args.name, instructor=instructor)
            course_id, join_code = course.id, course.join_code
    except CourseError as exc:
        raise CommandFailed(str(exc)) from None
    print(
        f"Created course {args.name!r} (id {course_id}), taught by {args.instructor}, with the "
        "exercises set ('loopgrade courses exercises' changes them). Learners join with this code:",
        file=sys.stderr,
    )
    print(join_code)
    return 0


def cmd_courses_list(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from app.courses.membership import members
    from app.models import Course, CourseRole

    with database_session(build_settings(args)) as session:
        for course in session.scalars(select(Course).order_by(Course.created_at)):
            teachers = ", ".join(
                u.email for u in members(session, course.id, CourseRole.INSTRUCTOR)
            )
            learners = len(members(session, course.id, CourseRole.LEARNER))
            print(
                f"{course.id}  {course.join_code}  {course.name}  "
                f"(instructors: {teachers or 'none'}; {learners} learners)"
            )
    return 0


def cmd_regrade(args: argparse.Namespace) -> int:
    """Grade an exercise's submissions in a course again. With a broker the workers grade them;
    without one this process does, and stores each grade with what it triggers (the LMS score,
    the webhooks) as outbox messages. It delivers none of them: the server and the workers do,
    with the deployment's delivery settings (which addresses a webhook may reach); a command
    run from another shell, without them, refused messages for good."""
    from app.db import create_db_engine, create_session_factory
    from app.grading.queue import open_grading_runner, run_grading_job
    from app.grading.regrades import RegradeRejected, request_exercise_regrade
    from app.models import RegradeReason
    from app.people.accounts import find_user_by_email
    from app.reactions import install_reactions
    from graders.exercises import UnknownExercise

    settings = build_settings(args)
    install_reactions()
    if not settings.broker_url and not check_sandbox():
        return 1
    migrate_database(settings)
    engine = create_db_engine(settings.database_url)
    sessions = create_session_factory(engine)
    try:
        with sessions.begin() as session:
            course_id, course_name = _course_of(session, args.course)
            by = find_user_by_email(session, args.by)
            if by is None:
                raise CommandFailed(f"no user has the email {args.by!r}")
            try:
                batch_id, submission_ids = request_exercise_regrade(
                    session,
                    course_id=course_id,
                    exercise_id=args.exercise,
                    only_outdated=not args.all,
                    by=by,
                    reason=RegradeReason(args.reason),
                )
            except RegradeRejected as exc:
                raise CommandFailed(str(exc)) from None
            except UnknownExercise:
                raise CommandFailed(
                    f"no exercise has the id {args.exercise!r} (see /api/v1/exercises)"
                ) from None
        log.info(
            "regrade %s: %d submissions of %s in %r queued",
            batch_id,
            len(submission_ids),
            args.exercise,
            course_name,
        )
        if settings.broker_url:
            from app.grading.celery_queue import create_celery, send_grading_task

            celery = create_celery(settings)
            for submission_id in submission_ids:
                send_grading_task(celery, settings, submission_id)
            celery.close()
            print(f"Sent {len(submission_ids)} submissions to the workers (regrade {batch_id}).")
            return 0
        runner = open_grading_runner(settings)
        try:
            for submission_id in submission_ids:
                run_grading_job(sessions, submission_id, settings, runner=runner)
        finally:
            runner.close()
        print(
            f"Graded {len(submission_ids)} submissions again (regrade {batch_id}); the server "
            "(or the workers) sends the changed scores to the LMS and the webhooks."
        )
    finally:
        engine.dispose()
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    from graders.cli import grade_file

    return grade_file(args.file, args.exercise, args.json)


def cmd_check_exercises(args: argparse.Namespace) -> int:
    from graders.cli import check_exercises

    return check_exercises()


def add_data_dir(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--data-dir",
        type=Path,
        help="where the database lives (default: $LOOPGRADE_DATA_DIR, or ./data)",
    )


def add_no_copy_before_upgrade(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--no-copy-before-upgrade",
        action="store_true",
        help="do not copy an SQLite database beside itself (loopgrade-at-REVISION.db) before "
        "upgrading it",
    )


def _add_server_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """serve, worker, migrate."""
    serve = commands.add_parser(
        "serve", help="apply migrations, check the sandbox, serve the web app and API"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--fd",
        type=int,
        help="serve on this inherited listening socket instead of --host and --port "
        "(a supervisor's socket; the tests bind their port before starting the server, so no "
        "other process can take it in between)",
    )
    add_data_dir(serve)
    add_no_copy_before_upgrade(serve)
    serve.set_defaults(run=cmd_serve)

    worker = commands.add_parser(
        "worker",
        help="grade submissions from the Celery broker (LOOPGRADE_BROKER_URL); "
        "LOOPGRADE_WORKER_COUNT threads, LOOPGRADE_WORKER_QUEUE queue",
    )
    add_data_dir(worker)
    worker.set_defaults(run=cmd_worker)

    migrate = commands.add_parser("migrate", help="apply database migrations")
    add_data_dir(migrate)
    add_no_copy_before_upgrade(migrate)
    migrate.set_defaults(run=cmd_migrate)


def _add_key_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """keys create, list, revoke."""
    keys = commands.add_parser("keys", help="manage REST API keys")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="COMMAND")
    keys_create = keys_commands.add_parser(
        "create", help="create an API key; prints it once, on the last line"
    )
    keys_create.add_argument("name", help="who the key is for, e.g. 'canvas-prod'")
    keys_create.add_argument(
        "--course",
        help="the course's id or join code: the key submits into it and reads only it "
        "(without it: a key tied to no course, which reads only submissions made without one)",
    )
    add_data_dir(keys_create)
    keys_create.set_defaults(run=cmd_keys_create)
    keys_list = keys_commands.add_parser("list", help="a course's API keys, revoked ones too")
    keys_list.add_argument(
        "--course", help="the course's id or join code (without it: keys tied to no course)"
    )
    add_data_dir(keys_list)
    keys_list.set_defaults(run=cmd_keys_list)
    keys_revoke = keys_commands.add_parser("revoke", help="revoke an API key by its id")
    keys_revoke.add_argument("key_id", help="the id 'loopgrade keys list' shows")
    add_data_dir(keys_revoke)
    keys_revoke.set_defaults(run=cmd_keys_revoke)


def _add_user_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """users create, list, reset-password, disable, enable, merge, set-role."""
    users = commands.add_parser("users", help="manage accounts")
    users_commands = users.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    users_create = users_commands.add_parser(
        "create", help="create an account; the password comes from LOOPGRADE_PASSWORD or a prompt"
    )
    users_create.add_argument("email")
    users_create.add_argument(
        "--role",
        choices=[role.value for role in SiteRole],
        default="learner",
        help="admin: everything; instructor: may create courses; learner (default)",
    )
    users_create.add_argument("--name", help="shown name (default: the email's local part)")
    add_data_dir(users_create)
    users_create.set_defaults(run=cmd_users_create)

    users_list = users_commands.add_parser("list", help="every account: email, role, state, name")
    add_data_dir(users_list)
    users_list.set_defaults(run=cmd_users_list)

    reset = users_commands.add_parser(
        "reset-password",
        help="print a one-time reset link for the account, or --set its password",
    )
    reset.add_argument("email")
    reset.add_argument(
        "--set",
        action="store_true",
        help="set the password now, from LOOPGRADE_PASSWORD or a prompt; its sessions end",
    )
    add_data_dir(reset)
    reset.set_defaults(run=cmd_users_reset_password)

    for name, help_text in (
        ("disable", "the account cannot sign in; its sessions end"),
        ("enable", "a disabled account can sign in again"),
    ):
        toggle = users_commands.add_parser(name, help=help_text)
        toggle.add_argument("email")
        add_data_dir(toggle)
        toggle.set_defaults(run=cmd_users_disable)

    merge = users_commands.add_parser(
        "merge",
        help="move a duplicate account's submissions, enrolments, drafts, overrides and LMS "
        "links to the kept account; a dry run unless --apply",
    )
    merge.add_argument("keep", help="email of the account kept")
    merge.add_argument("duplicate", help="email of the account emptied and disabled")
    merge.add_argument("--apply", action="store_true", help="merge (default: only report)")
    add_data_dir(merge)
    merge.set_defaults(run=cmd_users_merge)

    set_role = users_commands.add_parser("set-role", help="change an account's site role")
    set_role.add_argument("email")
    set_role.add_argument("role", choices=[role.value for role in SiteRole])
    add_data_dir(set_role)
    set_role.set_defaults(run=cmd_users_set_role)


def _add_course_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """courses create, list; regrade."""
    from app.models import RegradeReason

    courses = commands.add_parser("courses", help="manage courses")
    courses_commands = courses.add_subparsers(
        dest="courses_command", required=True, metavar="COMMAND"
    )
    courses_create = courses_commands.add_parser(
        "create", help="create a course; prints its join code alone on the last line"
    )
    courses_create.add_argument("name")
    courses_create.add_argument("--instructor", required=True, help="an existing user's email")
    add_data_dir(courses_create)
    courses_create.set_defaults(run=cmd_courses_create)
    courses_list = courses_commands.add_parser(
        "list", help="every course: id, join code, name, instructors"
    )
    add_data_dir(courses_list)
    courses_list.set_defaults(run=cmd_courses_list)
    add_course_exercises_command(courses_commands, add_data_dir)

    regrade = commands.add_parser(
        "regrade",
        help="grade an exercise's submissions in a course again (those graded against an "
        "older version, or --all); without a broker, here, sending the new scores to the LMS",
    )
    regrade.add_argument("--course", required=True, help="the course's id or join code")
    regrade.add_argument("--exercise", required=True, help="exercise id, e.g. train-step")
    regrade.add_argument("--by", required=True, help="the instructor's email, for the audit log")
    regrade.add_argument(
        "--all", action="store_true", help="every finished submission, not only outdated ones"
    )
    regrade.add_argument(
        "--reason",
        choices=[reason.value for reason in RegradeReason],
        required=True,  # as on the web form: the instructor says why, nothing is assumed
        help="what the learners are told",
    )
    add_data_dir(regrade)
    regrade.set_defaults(run=cmd_regrade)


def _add_local_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """grade, check-exercises: on this machine, without a server."""
    grade = commands.add_parser("grade", help="grade a file locally, without a server")
    grade.add_argument(
        "file", type=Path, help="a .py file (or .ipynb notebook) defining the exercise's function"
    )
    grade.add_argument("--exercise", required=True, help="exercise id, e.g. train-step")
    grade.add_argument("--json", action="store_true", help="print the report as JSON")
    grade.set_defaults(run=cmd_grade)

    check = commands.add_parser(
        "check-exercises",
        help="prove every exercise sound: the reference scores full, the starter scores 0, "
        "every known bug gets its diagnosis",
    )
    check.set_defaults(run=cmd_check_exercises)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopgrade", description="Auto-graded exercises for PyTorch training loops."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_server_commands(commands)
    _add_key_commands(commands)
    _add_user_commands(commands)
    _add_course_commands(commands)
    _add_local_commands(commands)
    add_exercise_commands(commands)
    add_lti_commands(commands, add_data_dir)
    add_backup_commands(commands, add_data_dir)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging()
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    try:
        exit_code: int = args.run(args)
    except ValidationError as exc:
        print(f"loopgrade: a LOOPGRADE_* setting is invalid: {exc}", file=sys.stderr)
        return 2
    except (CommandFailed, DataDirInUse) as exc:
        print(f"loopgrade: {exc}", file=sys.stderr)
        return 1
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
