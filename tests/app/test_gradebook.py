"""The gradebook's policies, the page, its CSV and the API agreeing, statistics, override and
regrade."""

from __future__ import annotations

import csv
import html
import io
import re
import time
from datetime import datetime, timedelta

import httpx

from app.api_keys import create_api_key
from app.courses.counted import score_cell
from app.courses.membership import AssignedExercise
from app.db import SessionFactory
from app.models import (
    Assignment,
    AuditEvent,
    Regrade,
    SiteRole,
    Submission,
    SubmissionStatus,
    utc_now,
)
from app.people.accounts import find_user_by_email
from graders.exercises import get_exercise, list_exercises
from graders.proving import judge_source
from tests.app.conftest import (
    CORRECT_CODE,
    EXERCISE,
    GRADING_TIMEOUT_SECONDS,
    MISSING_ZERO_GRAD_CODE,
)
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS

DUE = datetime(2026, 12, 1, 12, 0, tzinfo=utc_now().tzinfo)


def assigned(**policy: object) -> AssignedExercise:
    values: dict[str, object] = {
        "due_at": DUE,
        "late_policy": "penalty",
        "late_penalty_percent_per_day": 10.0,
        "scoring_policy": "best",
    }
    values.update(policy)
    return AssignedExercise(get_exercise(EXERCISE), Assignment(exercise_id=EXERCISE, **values))


def submission(score: float, at: datetime, **extra: object) -> Submission:
    return Submission(
        exercise_id=EXERCISE,
        status=SubmissionStatus.GRADED,
        score=score,
        max_score=10.0,
        created_at=at,
        **extra,
    )


def test_best_latest_late_penalty_lock_and_override() -> None:
    on_time = submission(6, DUE - timedelta(hours=1))
    late_full = submission(10, DUE + timedelta(hours=30))  # 2 started days late
    assert score_cell(assigned(), []).state == "not-tried"

    best = score_cell(assigned(), [on_time, late_full])
    assert (best.score, best.late_days, best.penalty_percent) == (8.0, 2, 20.0)
    assert best.state == "solved" and best.attempts == 2

    latest_on_time = score_cell(assigned(scoring_policy="latest"), [late_full, on_time])
    assert latest_on_time.score == 8.0  # the latest by time, not by list order
    later = submission(3, DUE + timedelta(days=3))
    assert score_cell(assigned(scoring_policy="latest"), [on_time, later]).score == 2.1

    locked = score_cell(assigned(late_policy="lock"), [on_time, late_full])
    assert (locked.score, locked.state) == (6, "solved")  # solved late, but it does not count
    # Only a locked one: it counts 0, marked as locked (not a plain 0).
    only_locked = score_cell(assigned(late_policy="lock"), [late_full])
    assert (only_locked.score, only_locked.locked, only_locked.counted_as) == (0, True, "locked")

    capped = score_cell(assigned(late_penalty_percent_per_day=60), [late_full])
    assert capped.score == 0.0
    undated = score_cell(assigned(due_at=None), [late_full])
    assert (undated.score, undated.late_days) == (10, 0)

    overridden = submission(2, DUE - timedelta(days=2), override_score=9.5, override_at=utc_now())
    cell = score_cell(assigned(), [on_time, late_full, overridden])
    assert (cell.score, cell.overridden) == (9.5, True)  # better than the best graded 8
    lower = submission(2, DUE - timedelta(days=2), override_score=5, override_at=utc_now())
    cell = score_cell(assigned(), [on_time, late_full, lower])
    assert (cell.score, cell.overridden) == (8.0, False)  # an override never lowers a better one

    queued = Submission(exercise_id=EXERCISE, status="queued", created_at=DUE)
    assert score_cell(assigned(), [queued]).state == "tried"
    assert score_cell(assigned(), [queued]).score is None


def test_lateness_is_worded_one_way() -> None:
    """How late, the started days the rule counts, what it takes, what counts; a lock as a lock."""
    late = submission(10, DUE + timedelta(hours=31))
    words = score_cell(assigned(), [late]).lateness
    assert words == (
        "Submitted 1 day, 7 hours late: 2 started days \N{MULTIPLICATION SIGN} 10% = "
        "\N{MINUS SIGN}20% (a day counts from its first minute); counts 8/10"
    )
    capped = score_cell(assigned(late_penalty_percent_per_day=60), [late]).lateness
    cap = "2 started days \N{MULTIPLICATION SIGN} 60%, capped at \N{MINUS SIGN}100%"
    assert capped is not None and cap in capped
    assert capped.endswith("; counts 0/10")
    free = score_cell(assigned(late_penalty_percent_per_day=0), [late]).lateness
    assert free == "Submitted 1 day, 7 hours late: late work counts in full; counts 10/10"
    locked = score_cell(assigned(late_policy="lock"), [late]).lateness
    assert locked == (
        "Submitted 1 day, 7 hours late: locked, this exercise takes no late work; counts 0/10"
    )
    assert score_cell(assigned(), [submission(10, DUE)]).lateness is None  # on time


def test_the_untouched_starter_is_not_a_start() -> None:
    """Only the starter sent: not started, and nothing counts (not 0); under "latest" a starter
    sent after real work leaves that work counting. An override of it counts."""
    starter = submission(0, DUE - timedelta(hours=2), diagnosis="not-started")
    cell = score_cell(assigned(), [starter, starter])
    assert (cell.state, cell.score, cell.counted_submission_id) == ("not-tried", None, None)
    assert cell.attempts == 2  # sent, as the attempt limit counts them
    work = submission(4, DUE - timedelta(hours=3), diagnosis="missing-zero-grad")
    latest = score_cell(assigned(scoring_policy="latest"), [work, starter])
    assert (latest.state, latest.score) == ("tried", 4)
    overridden = submission(0, DUE, diagnosis="not-started", override_score=5.0)
    assert score_cell(assigned(), [overridden]).score == 5.0


def make_class(sessions: SessionFactory) -> str:
    make_user(sessions, "teacher@example.org", SiteRole.INSTRUCTOR, name="Tess Teacher")
    users = {
        name: make_user(sessions, f"{name.lower()}@example.org", name=name)
        for name in ("Ann", "Ben", "Cat", "=Dan")
    }
    course_id = make_course(
        sessions, "teacher@example.org", *(f"{n.lower()}@example.org" for n in users)
    )
    now = utc_now()
    for name, scores in {"Ann": (3, 10), "Ben": (4,), "=Dan": (0, 0, 0)}.items():
        for index, score in enumerate(scores):
            graded(
                sessions,
                user_id=users[name],
                course_id=course_id,
                score=score,
                learner=f"{name.lower()}@example.org",
                created_at=now - timedelta(minutes=10 - index),
            )
    graded(sessions, user_id=None, course_id=course_id, score=7, learner="lms-learner-9")
    return course_id


def table_rows(html: str) -> list[list[str]]:
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", body, re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        text = [re.sub(r"<div.*?</div>|<span.*?</span>|<[^>]+>", "", c).strip() for c in cells]
        rows.append(text)
    return rows


def test_page_csv_and_api_show_the_same_gradebook(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id = make_class(sessions)
    with sessions.begin() as session:
        _, key = create_api_key(session, name="lms", course_id=course_id)
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "teacher@example.org")

    query = f"?sort={EXERCISE}&order=desc&only=all"
    page = teacher.get(f"/courses/{course_id}/gradebook{query}")
    assert page.status_code == 200
    shown = table_rows(page.text)
    names = [row[0] for row in shown]
    assert names == ["Ann", "lms-learner-9", "Ben", "=Dan", "Cat"]  # 10, 7, 4, 0, none
    assert 'aria-sort="descending"' in page.text
    assert "5 of 5 learners" in page.text

    exported = teacher.get(f"/courses/{course_id}/gradebook.csv{query}")
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("text/csv")
    assert "attachment" in exported.headers["content-disposition"]
    rows = list(csv.reader(io.StringIO(exported.text)))
    exercises = len(list_exercises())
    # The previous release's columns (d686a88: learner, email, a score per exercise, the
    # totals) first and in their order; what came later at the end (docs/api.md).
    titles = [f"{e.title} ({e.max_score:g})" for e in list_exercises()]
    assert rows[0] == [
        "learner", "email", *titles, "total", "max_total", *(f"{t} counted as" for t in titles)
    ]  # fmt: skip
    assert [row[0] for row in rows[1:]] == ["Ann", "lms-learner-9", "Ben", "'=Dan", "Cat"]
    train_column = 2 + 2  # train-step is the unit's third exercise
    counted_as = 2 + exercises + 2 + 2
    assert rows[0][counted_as] == rows[0][train_column] + " counted as"
    assert [row[train_column] for row in rows[1:]] == ["10", "7", "4", "0", ""]
    assert [row[counted_as] for row in rows[1:]] == ["graded"] * 4 + [""]
    assert [row[2 + exercises] for row in rows[1:]] == ["10", "7", "4", "0", "0"]

    api = client.get(f"/api/v1/gradebook{query}", headers={"Authorization": f"Bearer {key}"}).json()
    assert [row["learner"] for row in api["rows"]] == names
    assert [row["cells"][EXERCISE]["score"] for row in api["rows"]] == [10, 7, 4, 0, None]
    assert api["rows"][0]["cells"][EXERCISE]["state"] == "solved"

    # Filtered and narrowed to one exercise: the CSV follows exactly.
    narrowed = f"?q=N&only=incomplete&exercise={EXERCISE}"
    page = teacher.get(f"/courses/{course_id}/gradebook{narrowed}")
    shown = table_rows(page.text)
    # Ann solved it; Cat has no "n" in her name or email.
    assert [row[0] for row in shown] == ["=Dan", "Ben", "lms-learner-9"]
    rows = list(
        csv.reader(io.StringIO(teacher.get(f"/courses/{course_id}/gradebook.csv{narrowed}").text))
    )
    assert len(rows[0]) == 2 + 2 + 2
    assert [row[0] for row in rows[1:]] == ["'=Dan", "Ben", "lms-learner-9"]


def test_statistics_of_an_exercise(client: httpx.Client, sessions: SessionFactory) -> None:
    course_id = make_class(sessions)
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "teacher@example.org")
    page = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/stats")
    assert page.status_code == 200
    figures = dict(re.findall(r"<dt>(.*?)</dt><dd>([^<]*)", page.text))
    assert figures["Submissions graded"].strip() == "7"
    assert figures["Learners who started"].strip() == "4"
    # Ann, of the 4 enrolled (Cat never tried; lms-learner-9 tried but is not enrolled).
    assert figures["Solved"].startswith("25%")
    assert "1 of the 4 learners enrolled, not of those who started" in page.text
    assert figures["Attempts to solve"].startswith("median 2")
    # The diagnoses chart, most common first, with an accessible description; no solve in it.
    mistakes = page.text.split('id="diag-heading"', 1)[1].split("</section>", 1)[0]
    assert 'role="img"' in mistakes
    assert "Gradients not cleared before backward: 6" in mistakes
    assert "Correct" not in mistakes.replace("Correct submissions", "")
    assert "diagnosis=correct" not in mistakes
    assert 'regrade?which=all">Regrade all…' in page.text


def test_starter_submissions_are_no_mistake_of_the_class(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id = make_class(sessions)
    exercise = get_exercise(EXERCISE)
    starter = judge_source(exercise, exercise.starter_code)  # the grader's own verdict
    assert starter.diagnosis == "not-started"
    starters = [f"lms-learner-{index}" for index in range(3)] + ["ann@example.org"]
    for index, learner in enumerate(starters):
        graded(
            sessions,
            user_id=None if learner.startswith("lms") else user_id_of(sessions, learner),
            course_id=course_id,
            score=starter.score,
            learner=learner,
            diagnosis=starter.diagnosis,
            code=exercise.starter_code,
            # Ann's starter comes before her two tries: it is not an attempt to solve.
            created_at=utc_now() - timedelta(hours=1, minutes=index),
        )
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "teacher@example.org")
    page = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/stats")
    figures = dict(re.findall(r"<dt>(.*?)</dt><dd>([^<]*)", page.text))
    assert figures["Submissions graded"].strip() == "11"  # graded, and counted as such
    assert figures["Learners who started"].strip() == "4"  # Ann, Ben, =Dan, lms-learner-9
    assert figures["Attempts to solve"].startswith("median 2")  # Ann: 3, then 10
    mistakes = page.text.split('id="diag-heading"', 1)[1].split("</section>", 1)[0]
    assert "Gradients not cleared before backward: 6" in mistakes
    assert "Not started" not in mistakes and "not-started" not in mistakes
    # The starter-only learners are not started: "—" in the gradebook, in the filter.
    book = teacher.get(f"/courses/{course_id}/gradebook?exercise={EXERCISE}&only=not-started")
    assert {row[0] for row in table_rows(book.text)} == {"Cat"} | {
        f"lms-learner-{i}" for i in range(3)
    }
    assert book.text.count('<span class="hint" aria-label="not started">—</span>') == 4


def user_id_of(sessions: SessionFactory, email: str) -> str:
    with sessions.begin() as session:
        user = find_user_by_email(session, email)
        assert user is not None
        return user.id


def wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + GRADING_TIMEOUT_SECONDS
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_override_wins_until_removed_and_regrade_keeps_the_old_result(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "teacher@example.org", SiteRole.INSTRUCTOR)
    ann = make_user(sessions, "ann@example.org", name="Ann")
    course_id = make_course(sessions, "teacher@example.org", "ann@example.org")
    # Recorded as 2/10 against an old version; the code is in fact correct.
    submission_id = graded(
        sessions,
        user_id=ann,
        course_id=course_id,
        score=2,
        code=CORRECT_CODE,
        learner="ann@example.org",
    )
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "teacher@example.org")
    page_path = f"/submissions/{submission_id}"

    empty_reason = teacher.post(
        f"{page_path}/override",
        data={"score": "8", "reason": "  ", "csrf_token": token_of(teacher.get(page_path))},
    )
    assert empty_reason.status_code == 422 and "say why" in empty_reason.text
    too_high = teacher.post(
        f"{page_path}/override",
        data={"score": "11", "reason": "x", "csrf_token": token_of(teacher.get(page_path))},
    )
    assert too_high.status_code == 422 and "between 0 and 10" in too_high.text

    done = teacher.post(
        f"{page_path}/override",
        data={
            "score": "8",
            "reason": "Oral exam showed it",
            "confirmed": "yes",
            "csrf_token": token_of(teacher.get(page_path)),
        },
    )
    assert done.status_code == 303
    assert "Override set" in teacher.get(done.headers["location"]).text
    book = table_rows(teacher.get(f"/courses/{course_id}/gradebook").text)
    assert book[0][0] == "Ann" and book[0][3] == "8"

    # The learner sees the instructor's score and why.
    learner = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(learner, "ann@example.org")
    assert "Oral exam showed it" in learner.get(page_path).text

    # No reason is assumed: the instructor gives one, or nothing is queued.
    unexplained = teacher.post(
        f"{page_path}/regrade", data={"csrf_token": token_of(teacher.get(page_path))}
    )
    assert unexplained.status_code == 422 and "say why you regrade" in unexplained.text
    with sessions() as session:
        assert session.query(Regrade).count() == 0
    regrade = teacher.post(
        f"{page_path}/regrade",
        data={"csrf_token": token_of(teacher.get(page_path)), "reason": "instructor-request"},
    )
    assert regrade.status_code == 303

    def regraded() -> bool:
        with sessions() as session:
            row = session.query(Regrade).filter_by(submission_id=submission_id).one()
            return row.finished_at is not None

    wait_for(regraded, "the regrade")
    with sessions() as session:
        row = session.query(Regrade).filter_by(submission_id=submission_id).one()
        assert (row.old_score, row.old_diagnosis, row.old_exercise_version) == (
            2,
            "missing-zero-grad",
            "v-test",
        )
        assert (row.new_score, row.new_diagnosis) == (10, "correct")
        assert row.new_exercise_version == get_exercise(EXERCISE).version
        actions = [e.action for e in session.query(AuditEvent).order_by(AuditEvent.id)]
        assert actions == ["override.set", "regrade.submission"]
    page = teacher.get(page_path)
    assert "v-test" in page.text and "Regrades" in page.text
    # The override still wins over the new graded score, until removed.
    assert table_rows(teacher.get(f"/courses/{course_id}/gradebook").text)[0][3] == "8"
    removed = teacher.post(
        f"{page_path}/override/remove",
        data={"csrf_token": token_of(teacher.get(page_path)), "confirmed": "yes"},
    )
    assert removed.status_code == 303
    assert table_rows(teacher.get(f"/courses/{course_id}/gradebook").text)[0][3] == "10"
    audit = html.unescape(teacher.get(f"/courses/{course_id}/audit").text)
    assert "removed the override of Ann's" in audit and "Oral exam showed it" in audit


def test_regrade_every_outdated_submission_of_an_exercise(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "teacher@example.org", SiteRole.INSTRUCTOR)
    ann = make_user(sessions, "ann@example.org", name="Ann")
    course_id = make_course(sessions, "teacher@example.org", "ann@example.org")
    ids = [
        graded(sessions, user_id=ann, course_id=course_id, score=1, code=code)
        for code in (CORRECT_CODE, MISSING_ZERO_GRAD_CODE)
    ]
    teacher = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(teacher, "teacher@example.org")
    stats_path = f"/courses/{course_id}/exercises/{EXERCISE}/stats"
    stats = teacher.get(stats_path)
    assert "<strong>2</strong> submissions were graded against an older version" in stats.text
    # The stats page leads to a confirmation that says how many it will run.
    confirm_path = f"/courses/{course_id}/exercises/{EXERCISE}/regrade?which=outdated"
    assert confirm_path in stats.text.replace("&amp;", "&")
    confirm = teacher.get(confirm_path)
    assert "Regrade 2 submissions</button>" in confirm.text
    started = teacher.post(
        f"/courses/{course_id}/exercises/{EXERCISE}/regrade",
        data={
            "which": "outdated",
            "expected_count": "2",
            "reason": "exercise-updated",
            "csrf_token": token_of(confirm),
        },
    )
    assert started.status_code == 303
    progress_path = started.headers["location"]
    first = teacher.get(progress_path)
    assert "of 2 regraded" in first.text and 'data-poll="' in first.text

    def finished() -> bool:
        part = teacher.get(progress_path, params={"part": "1"}).text
        return 'data-finished="true"' in part

    wait_for(finished, "the exercise regrade")
    done = teacher.get(progress_path).text
    assert "2 of 2 regraded: done; 2 changed." in done
    with sessions() as session:
        scores = {s.id: (s.score, s.diagnosis) for s in session.query(Submission)}
    assert scores[ids[0]] == (10, "correct")
    changed_score, changed_diagnosis = scores[ids[1]]
    assert changed_diagnosis == "missing-zero-grad"
    assert changed_score is not None and changed_score < 10
    assert "graded against the current version" in teacher.get(stats_path).text
