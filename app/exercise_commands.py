"""`loopgrade exercises new|list` (the exercise folders) and `loopgrade courses exercises`
(one course's exercise list: add, remove, move, unit)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from app.cli_support import CommandFailed, build_settings, database_session

AddDataDir = Callable[[argparse.ArgumentParser], None]


def cmd_exercises_new(args: argparse.Namespace) -> int:
    from graders import exercises
    from graders.scaffold import (
        ScaffoldRefused,
        built_in_exercises,
        copy_exercise_folder,
        new_exercise_folder,
    )

    if (args.like is None) == (args.kind is None):
        known, _ = exercises.loaded_exercises()
        where = "this folder's" if known else f"none in {exercises.EXERCISES_DIR}: the built-in"
        raise CommandFailed(
            "say what to start from: --like ID, a working exercise to copy (its cases, bugs and "
            f"hints; {where} ones: {', '.join(e.id for e in known or built_in_exercises())}), "
            "or --kind K, a blank one of that kind"
        )
    try:
        if args.like is not None:
            folder = copy_exercise_folder(exercises.EXERCISES_DIR, args.id, args.like)
        else:
            folder = new_exercise_folder(exercises.EXERCISES_DIR, args.id, args.kind)
    except ScaffoldRefused as exc:
        raise CommandFailed(str(exc)) from None
    print(
        f"Created {folder}: change it (docs/authoring.md), then run 'loopgrade check-exercises', "
        "which says what is left."
    )
    return 0


def cmd_exercises_list(args: argparse.Namespace) -> int:
    from graders.exercises import list_exercises, refused_exercises

    for exercise in list_exercises():
        print(
            f"{exercise.position}. {exercise.id}  {exercise.kind}  "
            f"{exercise.unit or '(no unit)'}  {exercise.title}"
        )
    for folder, reason in refused_exercises().items():
        print(f"refused: {folder}: {reason}")
    return 0


def cmd_courses_exercises(args: argparse.Namespace) -> int:
    from app.courses.exercise_list import add_exercise, move_exercise, remove_exercise, set_unit
    from app.courses.membership import CourseError, assignments_of, find_course, in_units
    from app.people.accounts import find_user_by_email

    changes = [args.add, args.remove, args.move]
    if sum(change is not None for change in changes) > 1:
        raise CommandFailed("give one of --add, --remove, --move at a time")
    if (args.to is None) != (args.move is None):
        raise CommandFailed("--move ID goes with --to N (its place, from 1)")
    try:
        with database_session(build_settings(args)) as session:
            course = find_course(session, args.course)
            if course is None:
                raise CommandFailed(
                    f"no course has the id or join code {args.course!r} "
                    "(see 'loopgrade courses list')"
                )
            changing = any(change is not None for change in changes) or args.unit is not None
            by = find_user_by_email(session, args.by or "") if changing else None
            if changing and by is None:
                raise CommandFailed("say who changes it, for the audit log: --by EMAIL")
            if by is not None:
                if args.add is not None:
                    add_exercise(session, course=course, exercise_id=args.add, by=by)
                if args.remove is not None:
                    remove_exercise(session, course=course, exercise_id=args.remove, by=by)
                if args.move is not None:
                    move_exercise(
                        session, course=course, exercise_id=args.move, to_position=args.to, by=by
                    )
                if args.unit is not None:
                    which = args.move or args.add
                    if which is None:
                        raise CommandFailed("--unit needs the exercise: --move ID or --add ID")
                    set_unit(session, course=course, exercise_id=which, unit=args.unit, by=by)
            place = 0
            for unit, assigned in in_units(assignments_of(session, course.id)):
                print(unit or "(no unit)")
                for one in assigned:
                    place += 1
                    print(f"  {place}. {one.id}  {one.exercise.title}")
            for one in assignments_of(session, course.id, removed=True):
                print(f"removed (submissions kept): {one.id}")
    except CourseError as exc:
        raise CommandFailed(str(exc)) from None
    return 0


def add_exercise_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """exercises new, list."""
    exercises = commands.add_parser("exercises", help="the exercise folders")
    exercises_commands = exercises.add_subparsers(
        dest="exercises_command", required=True, metavar="COMMAND"
    )
    new = exercises_commands.add_parser(
        "new", help="a new exercise folder: a copy of a working one, or a blank one of a kind"
    )
    new.add_argument("id", help="lower-case words joined by '-', e.g. adam-step")
    start = new.add_mutually_exclusive_group()
    start.add_argument(
        "--like",
        metavar="ID",
        help="copy this working exercise (its cases, bugs and hints): one of the folder's, or a "
        "built-in one ('loopgrade exercises list')",
    )
    start.add_argument(
        "--kind",
        help="a blank exercise of this kind, e.g. step-function (docs/exercises.md lists them)",
    )
    new.set_defaults(run=cmd_exercises_new)
    listing = exercises_commands.add_parser(
        "list", help="every exercise: place, id, kind, unit, title; and refused folders"
    )
    listing.set_defaults(run=cmd_exercises_list)


def add_course_exercises_command(
    courses_commands: argparse._SubParsersAction[argparse.ArgumentParser], add_data_dir: AddDataDir
) -> None:
    """courses exercises COURSE [--add ID | --remove ID | --move ID --to N] [--unit U]."""
    command = courses_commands.add_parser(
        "exercises",
        help="a course's exercise list by unit; --add, --remove (submissions kept), --move "
        "ID --to N, --unit U (with --add or --move; blank: the exercise's own)",
    )
    command.add_argument("course", help="the course's id or join code")
    command.add_argument("--add", metavar="ID", help="set this exercise (a removed one comes back)")
    command.add_argument("--remove", metavar="ID", help="take it out; its submissions stay")
    command.add_argument("--move", metavar="ID", help="move it to --to N")
    command.add_argument("--to", type=int, metavar="N", help="its place, from 1")
    command.add_argument("--unit", help="the unit it is listed under in this course")
    command.add_argument("--by", help="the instructor's email, for the audit log")
    add_data_dir(command)
    command.set_defaults(run=cmd_courses_exercises)
