"""A course's exercise list: removed exercises kept and hidden from learners, the course's own
order and units, audited; through the domain functions, `loopgrade courses exercises` and
`loopgrade exercises new|list`."""

from __future__ import annotations

import csv
import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.audit import events
from app.courses.exercise_list import add_exercise, move_exercise, remove_exercise, set_unit
from app.courses.membership import (
    CourseError,
    NotFound,
    assignment_of,
    assignments_of,
    find_course,
    in_units,
)
from app.db import SessionFactory
from app.models import Assignment, SiteRole, User
from app.settings import Settings
from graders import exercises
from graders.exercises import get_exercise, list_exercises
from tests.app.conftest import loopgrade
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS

REPO_EXERCISES = Path(__file__).resolve().parents[2] / "exercises"
ALL_IDS = [e.id for e in list_exercises()]


def course_ids(sessions: SessionFactory, course_id: str, *, removed: bool = False) -> list[str]:
    with sessions() as session:
        return [a.id for a in assignments_of(session, course_id, removed=removed)]


@pytest.fixture
def course(sessions: SessionFactory) -> tuple[str, str]:
    """(course id, instructor id) of a new course: every exercise, in the exercises' order."""
    teacher = make_user(sessions, "teach@example.org", SiteRole.INSTRUCTOR)
    make_user(sessions, "ada@example.org")
    return make_course(sessions, "teach@example.org", "ada@example.org"), teacher


def test_removed_is_kept_hidden_and_restored_as_it_was(
    sessions: SessionFactory, course: tuple[str, str]
) -> None:
    course_id, teacher = course
    assert course_ids(sessions, course_id) == ALL_IDS
    removed = ALL_IDS[1]
    submission = graded(sessions, user_id=None, course_id=course_id, score=7, exercise=removed)
    with sessions.begin() as session:
        by, row = session.get(User, teacher), assignment_of(session, course_id, removed).assignment
        course_row = find_course(session, course_id)
        assert by is not None and course_row is not None
        row.late_penalty_percent_per_day = 15.0
        remove_exercise(session, course=course_row, exercise_id=removed, by=by)
        with pytest.raises(CourseError, match="does not set"):
            remove_exercise(session, course=course_row, exercise_id=removed, by=by)
    assert course_ids(sessions, course_id) == [e for e in ALL_IDS if e != removed]
    assert course_ids(sessions, course_id, removed=True) == [removed]
    with sessions() as session:
        with pytest.raises(NotFound):
            assignment_of(session, course_id, removed)
        assert session.get(Assignment, row.id) is not None  # kept, with its submissions
        from app.models import Submission

        assert session.get(Submission, submission) is not None
    with sessions.begin() as session:
        by, course_row = session.get(User, teacher), find_course(session, course_id)
        assert by is not None and course_row is not None
        add_exercise(session, course=course_row, exercise_id=removed, by=by)
        with pytest.raises(CourseError, match="already"):
            add_exercise(session, course=course_row, exercise_id=removed, by=by)
        with pytest.raises(CourseError, match="no exercise"):
            add_exercise(session, course=course_row, exercise_id="no-such", by=by)
    # Back, last of its unit, with the policy it had.
    unit = get_exercise(removed).unit
    in_its_unit = [e for e in course_ids(sessions, course_id) if get_exercise(e).unit == unit]
    assert in_its_unit[-1] == removed
    with sessions() as session:
        assert (
            assignment_of(session, course_id, removed).assignment.late_penalty_percent_per_day == 15
        )
        said = [entry.sentence for entry in events(session, course_id=course_id)]
    assert any("took" in s and "out of the course" in s for s in said), said


def test_the_course_orders_and_groups_its_exercises(
    sessions: SessionFactory, course: tuple[str, str]
) -> None:
    course_id, teacher = course
    last = ALL_IDS[-1]
    with sessions.begin() as session:
        by, course_row = session.get(User, teacher), find_course(session, course_id)
        assert by is not None and course_row is not None
        move_exercise(session, course=course_row, exercise_id=last, to_position=1, by=by)
        set_unit(session, course=course_row, exercise_id=last, unit="  Week 0:  warm-up ", by=by)
        with pytest.raises(CourseError, match="from 1 to"):
            move_exercise(session, course=course_row, exercise_id=last, to_position=99, by=by)
        with pytest.raises(CourseError, match="at most"):
            set_unit(session, course=course_row, exercise_id=last, unit="u" * 81, by=by)
    assert course_ids(sessions, course_id) == [last, *ALL_IDS[:-1]]
    with sessions() as session:
        units = in_units(assignments_of(session, course_id))
        said = [entry.sentence for entry in events(session, course_id=course_id)]
    assert [(unit, [a.id for a in assigned]) for unit, assigned in units] == [
        ("Week 0: warm-up", [last]),
        *(
            (unit, [e.id for e in list_exercises()[:-1] if e.unit == unit])
            for unit in dict.fromkeys(e.unit for e in list_exercises()[:-1])
        ),
    ]
    assert any("to place 1" in s for s in said) and any("Week 0: warm-up" in s for s in said)


def test_the_cli_lists_removes_moves_and_adds_back(
    settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "teach@example.org", SiteRole.INSTRUCTOR)
    course_id = make_course(sessions, "teach@example.org")
    first, second = ALL_IDS[0], ALL_IDS[1]
    base = ("courses", "exercises", course_id, "--by", "teach@example.org")
    removed = loopgrade(*base, "--remove", first, data_dir=settings.data_dir)
    assert removed.returncode == 0, removed.stderr
    assert f"removed (submissions kept): {first}" in removed.stdout
    assert f"1. {second}" in removed.stdout
    moved = loopgrade(
        *base, "--move", second, "--to", "4", "--unit", "Later", data_dir=settings.data_dir
    )
    assert moved.returncode == 0, moved.stderr
    assert f"Later\n  4. {second}" in moved.stdout
    back = loopgrade(*base, "--add", first, data_dir=settings.data_dir)
    assert back.returncode == 0 and "removed" not in back.stdout, back.stdout
    # Listed within its unit: units come where their first exercise is.
    assert f"  4. {first}  {list_exercises()[0].title}\nLater\n  5. {second}" in back.stdout
    refused = loopgrade(*base, "--move", first, data_dir=settings.data_dir)
    assert refused.returncode == 1
    assert refused.stderr == "loopgrade: --move ID goes with --to N (its place, from 1)\n"
    unknown = loopgrade(*base, "--add", "no-such", data_dir=settings.data_dir)
    # The last line of the log: the one a person reads.
    assert unknown.stderr.splitlines()[-1] == "loopgrade: there is no exercise 'no-such'"


@pytest.fixture
def train_step_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of exercises with train-step alone. The commands run in this process, whose
    exercises folder was read at import: it is pointed at the copy here as the variable points
    a new process's (never at the repository's, which `exercises new` would write into)."""
    copy = tmp_path / "exercises"
    shutil.copytree(REPO_EXERCISES / "train-step", copy / "train-step")
    monkeypatch.setattr(exercises, "EXERCISES_DIR", copy)
    exercises._loaded.cache_clear()
    yield copy
    exercises._loaded.cache_clear()


@pytest.mark.no_database
def test_exercises_new_makes_a_folder_check_exercises_explains(train_step_only: Path) -> None:
    copy = train_step_only
    env = {"LOOPGRADE_EXERCISES_DIR": str(copy)}
    made = loopgrade("exercises", "new", "my-step", "--kind", "step-function", env=env)
    assert made.returncode == 0, made.stderr
    exercises._loaded.cache_clear()  # the next command reads the folder afresh, as a process
    folder = copy / "my-step"
    assert {p.name for p in folder.iterdir()} == {
        "exercise.toml", "prompt.md", "starter.py", "solution.py", "bugs"
    }  # fmt: skip
    assert (folder / "bugs" / "README.md").exists()
    listed = loopgrade("exercises", "list", env=env)
    # Not served until proven sound: the list says why (the reference does not train yet).
    said = next(line for line in listed.stdout.splitlines() if line.startswith("refused: my-step"))
    assert "not served, unsound" in said and "the reference solution scores 0/" in said, said
    for args, message in [
        (("my-step", "--kind", "step-function"), "the exercise 'my-step' exists already"),
        (("other", "--kind", "no-kind"), "'no-kind' is no kind: use one of"),
        (("Bad Id", "--kind", "step-function"), "'Bad Id' is no exercise id"),
    ]:
        refused = loopgrade("exercises", "new", *args, env=env)
        assert refused.returncode == 1
        # One line, after the log's: what was refused and why.
        said = refused.stderr.splitlines()[-1]
        assert said.startswith("loopgrade: ") and message in said, refused.stderr
    checked = loopgrade("check-exercises", env=env)
    assert checked.returncode == 1
    assert f"{folder}/exercise.toml: correct: missing" in checked.stdout
    assert "my-step: the reference solution scores 0/" in checked.stdout


def test_exercises_new_like_copies_a_working_exercise(train_step_only: Path) -> None:
    """A built-in the folder lacks, copied whole under the new id: proven sound and served."""
    copy = train_step_only
    env = {"LOOPGRADE_EXERCISES_DIR": str(copy)}
    made = loopgrade("exercises", "new", "my-adam", "--like", "adam-step", env=env)
    assert made.returncode == 0, made.stderr
    exercises._loaded.cache_clear()  # the next command reads the folder afresh, as a process
    source, folder = REPO_EXERCISES / "adam-step", copy / "my-adam"
    files = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file())
    assert sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file()) == files
    assert any(path.parts[0] == "bugs" for path in files)
    for path in files:
        if path.name != "exercise.toml":
            assert (folder / path).read_bytes() == (source / path).read_bytes()
    toml = (folder / "exercise.toml").read_text()
    assert '\nid = "my-adam"\n' in toml, toml[:200]
    assert f"position = {get_exercise_position(copy, 'train-step') + 1}\n" in toml
    # Only the exercise's own id and place changed: its cases and bugs are adam-step's.
    assert toml.count("\n") == (source / "exercise.toml").read_text().count("\n")
    listed = loopgrade("exercises", "list", env=env)
    assert "my-adam  step-function" in listed.stdout, listed.stdout + listed.stderr
    assert "refused" not in listed.stdout
    unknown = loopgrade("exercises", "new", "other", "--like", "no-such", env=env)
    assert unknown.returncode == 1
    said = unknown.stderr.splitlines()[-1]
    assert "--like 'no-such': no such exercise; start from one of: train-step, my-adam" in said


def test_exercises_new_in_an_empty_folder_offers_the_built_ins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "exercises"
    empty.mkdir()
    monkeypatch.setattr(exercises, "EXERCISES_DIR", empty)
    exercises._loaded.cache_clear()
    try:
        asked = loopgrade("exercises", "new", "mine", env={"LOOPGRADE_EXERCISES_DIR": str(empty)})
    finally:
        exercises._loaded.cache_clear()
    assert asked.returncode == 1
    said = asked.stderr.splitlines()[-1]
    assert said.startswith("loopgrade: say what to start from: --like ID"), said
    assert f"none in {empty}: the built-in ones: " in said
    assert all(f.name in said for f in REPO_EXERCISES.iterdir() if f.is_dir())
    assert not any(empty.iterdir())


def get_exercise_position(folders: Path, exercise_id: str) -> int:
    return exercises.load_exercise(folders / exercise_id).position


def test_the_settings_page_orders_and_groups_and_says_what_was_wrong(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    course_id = make_course(sessions, "tess@example.org")
    teacher = httpx.Client(
        base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS, follow_redirects=True
    )
    sign_in(teacher, "tess@example.org")
    path = f"/courses/{course_id}/settings"
    page = teacher.get(path)
    assert 'id="list-heading"' in page.text and f'id="place-{ALL_IDS[0]}"' in page.text
    token = token_of(page)
    places = [str(len(ALL_IDS) - i) for i in range(len(ALL_IDS))]  # reversed
    units = ["" for _ in ALL_IDS]
    units[0] = "Extra"
    saved = teacher.post(
        f"/courses/{course_id}/exercise-list",
        data={"csrf_token": token, "exercise": ALL_IDS, "place": places, "unit": units},
    )
    assert saved.status_code == 200 and "order and units are saved" in saved.text
    assert course_ids(sessions, course_id) == [*reversed(ALL_IDS[1:]), ALL_IDS[0]]
    with sessions() as session:
        assert [u for u, _ in in_units(assignments_of(session, course_id))] == [
            *dict.fromkeys(e.unit for e in reversed(list_exercises()[1:])),
            "Extra",
        ]
    refused = teacher.post(
        f"/courses/{course_id}/exercise-list",
        data={"csrf_token": token, "exercise": ALL_IDS, "place": ["x", *places[1:]], "unit": units},
    )
    assert refused.status_code == 422
    assert "give a whole number, 1 for the first" in refused.text
    stale = teacher.post(
        f"/courses/{course_id}/exercise-list",
        data={"csrf_token": token, "exercise": ALL_IDS[1:], "place": places[1:], "unit": units[1:]},
    )
    assert stale.status_code == 422 and "reload the page" in stale.text
    # Unticked on the settings form: kept, hidden from the course's learners, marked removed.
    learner = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    make_user(sessions, "ada@example.org")
    sign_in(learner, "ada@example.org")
    with sessions.begin() as session:
        course_row, by = (
            find_course(session, course_id),
            session.scalars(select(User).where(User.email == "tess@example.org")).one(),
        )
        assert course_row is not None
        remove_exercise(session, course=course_row, exercise_id=ALL_IDS[0], by=by)
        from app.courses.membership import join_course

        ada = session.scalars(select(User).where(User.email == "ada@example.org")).one()
        join_course(session, user=ada, join_code=course_row.join_code)
    assert learner.get(f"/courses/{course_id}/exercises/{ALL_IDS[0]}").status_code == 404
    course_page = learner.get(f"/courses/{course_id}").text
    assert list_exercises()[0].title not in course_page
    assert list_exercises()[1].title in course_page
    gradebook = teacher.get(f"/courses/{course_id}/gradebook").text
    marked = gradebook.split('id="removed-exercises"')[1].split("</p>")[0]
    assert list_exercises()[0].title in marked and "submissions and grades are kept" in marked
    # The CSV leaves it out as the table does: no column, not in the maximum total.
    header, *rows = csv.reader(io.StringIO(teacher.get(f"/courses/{course_id}/gradebook.csv").text))
    kept = list_exercises()[:0:-1]  # in the course's order, reversed above
    titles = [f"{e.title} ({e.max_score:g})" for e in kept]
    assert header == [
        "learner", "email", *titles, "total", "max_total", *(f"{t} counted as" for t in titles)
    ]  # fmt: skip
    assert all(list_exercises()[0].title not in column for column in header)
    max_total = header.index("max_total")
    assert [row[max_total] for row in rows] == [f"{sum(e.max_score for e in kept):g}"]


def test_the_settings_page_names_a_folder_not_served_and_why(
    client: httpx.Client, sessions: SessionFactory, train_step_only: Path
) -> None:
    """An unsound folder (its reference never clears the gradients) is in no course's list:
    the instructor is told it exists and why it is not served, not left to wonder."""
    shutil.copytree(REPO_EXERCISES / "adam-step", train_step_only / "adam-step")
    solution = train_step_only / "adam-step" / "solution.py"
    solution.write_text(solution.read_text().replace("    optimizer.zero_grad()\n", ""))
    exercises._loaded.cache_clear()
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    course_id = make_course(sessions, "tess@example.org")
    teacher = httpx.Client(
        base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS, follow_redirects=True
    )
    sign_in(teacher, "tess@example.org")
    page = teacher.get(f"/courses/{course_id}/settings").text
    assert course_ids(sessions, course_id) == ["train-step"]
    refused = page[page.index('id="refused-exercises"') :]
    assert "<strong>adam-step</strong>: " in refused
    assert "not served, unsound (" in refused and "the reference solution scores" in refused
