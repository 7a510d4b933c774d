"""The misconception map and the item analysis: their rules on made-up paths, and the pages
and CSV over HTTP from rows graded for real (the sandbox) and rows made directly."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta

import httpx
import pytest
from sqlalchemy import func, select

from app.courses.attempts import Attempt, LearnerAttempts
from app.courses.item_analysis import item_analysis
from app.courses.misconceptions import START, misconception_map
from app.db import SessionFactory
from app.models import ExerciseOpen, Submission, utc_now
from tests.app.conftest import EXERCISE, MISSING_ZERO_GRAD_CODE
from tests.app.people import graded, make_course, make_user, sign_in
from tests.app.test_gradebook import wait_for
from tests.servers import HTTP_TIMEOUT_SECONDS

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=utc_now().tzinfo)


def attempts(*steps: tuple[str, float, float]) -> list[Attempt]:
    """(diagnosis, score out of 10, hours before NOW) per attempt, oldest first."""
    return [
        Attempt(f"s{index}", code, score, 10.0, NOW - timedelta(hours=hours), score >= 10)
        for index, (code, score, hours) in enumerate(steps)
    ]


def learner(
    key: str, *steps: tuple[str, float, float], opened_hours: float | None = None
) -> LearnerAttempts:
    opened = None if opened_hours is None else NOW - timedelta(hours=opened_hours)
    return LearnerAttempts(key, key.title(), f"{key}@example.org", attempts(*steps), opened)


ANN = learner(  # the textbook path: never clears, clears too late, then right
    "ann",
    ("missing-zero-grad", 3, 5),
    ("missing-zero-grad", 3, 4.5),
    ("zero-grad-before-step", 7, 4),
    ("correct", 10, 3),
    opened_hours=6,
)
BEN = learner(  # stuck: the same mistake three times at his latest attempts
    "ben",
    ("missing-backward", 0, 3),
    ("missing-zero-grad", 3, 2),
    ("missing-zero-grad", 3, 1),
    ("missing-zero-grad", 3, 0.5),
)
CAT = learner("cat", ("missing-zero-grad", 3, 50), ("missing-backward", 0, 49))  # idle 2 days
DAN = learner("dan", ("correct", 10, 1), opened_hours=1.5)  # right at once


def test_the_map_counts_moves_stays_and_orders_states_as_learners_meet_them() -> None:
    found = misconception_map([ANN, BEN, CAT, DAN], now=NOW)
    assert found.learners == 4
    assert found.states[0] == START and found.states[-1] == "correct"
    assert set(found.states) == {
        START,
        "missing-zero-grad",
        "zero-grad-before-step",
        "missing-backward",
        "correct",
    }
    moves = {(m.source, m.target): (m.moves, m.learners) for m in found.moves}
    assert moves[(START, "missing-zero-grad")] == (2, 2)  # Ann, Cat
    assert moves[("missing-zero-grad", "missing-zero-grad")] == (3, 2)  # Ann once, Ben twice
    assert moves[("missing-zero-grad", "zero-grad-before-step")] == (1, 1)
    assert moves[("zero-grad-before-step", "correct")] == (1, 1)
    assert moves[(START, "correct")] == (1, 1)
    assert sum(m.moves for m in found.moves) == 4 + 4 + 2 + 1  # one per attempt
    assert found.moves[0].moves == max(m.moves for m in found.moves)

    stays = {s.diagnosis: s for s in found.stays}
    zero = stays["missing-zero-grad"]
    assert (zero.learners, zero.stays, zero.still_there) == (3, 3, 1)  # Ann, Ben, Cat; Ben now
    assert zero.median_attempts == 2  # stays of 2 (Ann), 3 (Ben), 1 (Cat)
    assert zero.median_hours == pytest.approx(1.0)  # Ann 1 h, Cat 1 h; Ben's has not ended
    assert stays["correct"].median_hours is None and stays["correct"].still_there == 2


def test_stuck_learners_are_named_with_the_reason() -> None:
    found = misconception_map([ANN, BEN, CAT, DAN], now=NOW)
    reasons = {s.learner.key: s.reason for s in found.stuck}
    assert set(reasons) == {"ben", "cat"}  # Ann and Dan solved it
    assert reasons["ben"] == "Gradients not cleared before backward 3 times in a row"
    assert reasons["cat"].startswith("no better score for 2 days (1 attempt since)")
    assert next(s for s in found.stuck if s.learner.key == "ben").latest.submission_id == "s3"
    # Fewer repeats than asked, and recent: not stuck.
    assert misconception_map([BEN], now=NOW, repeats=4).stuck == []
    # A solve, however late after a stuck run, ends it.
    solved_late = learner("eve", *[("missing-zero-grad", 3, 9 - i) for i in range(5)])
    solved_late.attempts.append(attempts(("correct", 10, 0))[0])
    assert misconception_map([solved_late], now=NOW).stuck == []


def test_item_analysis_by_attempt_histograms_and_time_to_solve() -> None:
    items = item_analysis([ANN, BEN, CAT, DAN])
    first = items.by_attempt[0]
    assert (first.label, first.learners) == ("1", 4)
    assert first.mean_percent == pytest.approx((30 + 0 + 30 + 100) / 4)
    assert first.solved_percent == pytest.approx(25)
    assert [row.label for row in items.by_attempt] == ["1", "2", "3", "4"]
    assert items.by_attempt[3].mean_percent == pytest.approx((100 + 30) / 2)
    assert dict(items.first) == {
        "0%": 1,
        "1-25%": 0,
        "26-50%": 2,
        "51-75%": 0,
        "76-99%": 0,
        "100%": 1,
    }
    assert dict(items.best)["100%"] == 2 and dict(items.last)["26-50%"] == 1
    # Ann opened it 6 h ago and solved it 3 h ago; Dan opened 1.5 h ago, solved 1 h ago.
    assert sorted(items.solve_hours) == pytest.approx([0.5, 3.0])
    assert dict(items.solve_times) == {
        "under 10 min": 0,
        "10-30 min": 0,
        "30 min-2 h": 1,
        "2 h-1 day": 1,
        "over a day": 0,
    }
    assert items.timed_from_first_attempt == 0
    unrecorded = learner("fay", ("missing-backward", 0, 2), ("correct", 10, 1.9))
    assert item_analysis([unrecorded]).timed_from_first_attempt == 1
    assert item_analysis([unrecorded]).solve_hours == pytest.approx([0.1])
    many = learner("gus", *[("missing-backward", 0, 20 - i) for i in range(14)])
    rows = item_analysis([many]).by_attempt
    assert [r.label for r in rows][-1] == "10+" and rows[-1].attempts == 5


def test_item_analysis_has_each_checks_pass_rate_least_passed_first() -> None:
    def tried(key: str, *runs: tuple[tuple[str, bool], ...]) -> LearnerAttempts:
        made = [
            Attempt(f"{key}{i}", "incorrect", 0, 10.0, NOW - timedelta(hours=5 - i), False, checks)
            for i, checks in enumerate(runs)
        ]
        return LearnerAttempts(key, key.title(), "", made, None)

    eve = tried("eve", (("runs", True), ("clears", False)), (("runs", True), ("clears", True)))
    fin = tried("fin", (("runs", True), ("clears", False)))
    rates = {r.check_id: r for r in item_analysis([eve, fin]).checks}
    assert [r.check_id for r in item_analysis([eve, fin]).checks] == ["clears", "runs"]
    assert rates["clears"].attempts == 3
    assert rates["clears"].passed_percent == pytest.approx(100 / 3)
    assert rates["clears"].failing_now == 1  # Fin, at his latest attempt; Eve passes it now
    assert (rates["runs"].passed_percent, rates["runs"].failing_now) == (100, 0)


def _class(sessions: SessionFactory) -> str:
    make_user(sessions, "teacher@example.org")
    make_user(sessions, "ann@example.org", name="Ann")
    make_user(sessions, "ben@example.org", name='=HYPERLINK("x")')  # a hostile name
    make_user(sessions, "outsider@example.org")
    return make_course(sessions, "teacher@example.org", "ann@example.org", "ben@example.org")


def _client(client: httpx.Client, email: str) -> httpx.Client:
    other = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    sign_in(other, email)
    return other


def test_a_learner_graded_three_times_on_one_mistake_is_on_the_map_and_stuck(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id = _class(sessions)
    ann = _client(client, "ann@example.org")
    exercise_path = f"/courses/{course_id}/exercises/{EXERCISE}"
    page = ann.get(exercise_path)
    assert page.status_code == 200
    ann.get(exercise_path)  # a second open changes nothing
    with sessions() as session:
        opens = session.scalar(select(func.count()).select_from(ExerciseOpen))
    assert opens == 1
    for _ in range(3):
        token = re.search(r'name="csrf_token" value="([^"]+)"', ann.get(exercise_path).text)
        assert token is not None
        sent = ann.post(
            exercise_path,
            data={"code": MISSING_ZERO_GRAD_CODE, "csrf_token": token[1]},
            headers={"Accept": "application/json"},
        )
        assert sent.status_code in (200, 202, 303), sent.text
    teacher = _client(client, "teacher@example.org")
    map_path = f"/courses/{course_id}/exercises/{EXERCISE}/map"

    def three_graded() -> bool:
        moves = teacher.get(f"{map_path}.csv?table=moves").text
        return "missing-zero-grad,missing-zero-grad,2,1" in moves

    wait_for(three_graded, "three gradings of the same mistake")
    page = teacher.get(map_path)
    assert page.status_code == 200
    stuck = page.text.split('id="stuck-heading"', 1)[1].split("</section>", 1)[0]
    assert "Ann" in stuck and "3 times in a row" in stuck
    assert re.search(r'href="/submissions/[0-9a-f-]{36}">Gradients not cleared', stuck)
    assert "Start to Gradients not cleared before backward: 1" in page.text  # the chart's words
    assert 'role="img"' in page.text

    # Beside her name, what the instructor can do: an extension, the hints she opened, a mail.
    with sessions() as session:
        ann_id, latest = session.execute(
            select(Submission.user_id, Submission.id).order_by(Submission.created_at.desc())
        ).first()  # type: ignore[misc]
    assert "Hints opened</th>" in page.text and ">none</td>" in stuck
    token = re.search(r'name="csrf_token" value="([^"]+)"', ann.get(f"/submissions/{latest}").text)
    assert token is not None
    ann.post(f"/submissions/{latest}/hints", data={"level": "1", "csrf_token": token[1]})
    stuck = teacher.get(map_path).text.split('id="stuck-heading"', 1)[1].split("</section>", 1)[0]
    assert "Gradients not cleared before backward: 1 of 3" in stuck
    assert (
        f'href="/courses/{course_id}/extensions?learner={ann_id}&amp;exercise={EXERCISE}' in stuck
    )
    assert 'href="mailto:ann%40example.org?subject=' in stuck
    # Item analysis: each check's pass rate, the least passed first.
    rates = page.text.split('class="data compact cards check-rates"', 1)[1].split("</table>", 1)[0]
    assert re.search(r"<code>[\w-]+</code></th><td[^>]*>3</td>\s*<td[^>]*>0%</td>", rates)
    checks_csv = teacher.get(f"{map_path}.csv?table=checks").text.splitlines()
    assert checks_csv[0] == "check,attempts,passed_percent,learners_failing_now"
    assert checks_csv[1].endswith(",3,0.0,1")


def test_map_pages_and_csv_for_instructors_only(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    course_id = _class(sessions)
    with sessions() as session:
        from app.people.accounts import find_user_by_email

        ann_user = find_user_by_email(session, "ann@example.org")
        ben_user = find_user_by_email(session, "ben@example.org")
        assert ann_user is not None and ben_user is not None
        ann_id, ben_id = ann_user.id, ben_user.id
    start = utc_now() - timedelta(days=3)
    for hours, score, code in ((0, 3, "missing-zero-grad"), (1, 10, "correct")):
        graded(
            sessions,
            user_id=ann_id,
            course_id=course_id,
            score=score,
            diagnosis=code,
            created_at=start + timedelta(hours=hours),
        )
    for hours in (0, 1):  # Ben: no better score for three days
        graded(
            sessions,
            user_id=ben_id,
            course_id=course_id,
            score=0,
            diagnosis="missing-backward" if hours else "missing-zero-grad",
            created_at=start + timedelta(hours=hours),
        )
    graded(sessions, user_id=None, course_id=course_id, score=0, diagnosis="not-started")
    map_path = f"/courses/{course_id}/exercises/{EXERCISE}/map"

    teacher = _client(client, "teacher@example.org")
    page = teacher.get(map_path)
    assert page.status_code == 200
    figures = dict(re.findall(r"<dt>(.*?)</dt><dd>([^<]*)", page.text))
    assert figures["Learners with an attempt"] == "2"  # the starter row is nobody's attempt
    assert figures["Stuck"] == "1"
    assert "no better score for 3 days" in page.text
    assert "=HYPERLINK" in page.text and "<script" not in page.text.split("<main", 1)[1]

    stuck = list(csv.reader(io.StringIO(teacher.get(f"{map_path}.csv?table=stuck").text)))
    assert stuck[0][:3] == ["learner", "email", "reason"]
    assert stuck[1][0] == '\'=HYPERLINK("x")'  # never a formula in a spreadsheet
    stays = list(csv.DictReader(io.StringIO(teacher.get(f"{map_path}.csv?table=stays").text)))
    assert {row["diagnosis"] for row in stays} == {
        "missing-zero-grad",
        "missing-backward",
        "correct",
    }
    by_attempt = list(
        csv.DictReader(io.StringIO(teacher.get(f"{map_path}.csv?table=attempts").text))
    )
    assert [(r["attempt"], r["mean_percent"]) for r in by_attempt] == [
        ("1", "15.0"),
        ("2", "50.0"),
    ]
    download = teacher.get(f"{map_path}.csv?table=moves")
    assert download.headers["content-type"].startswith("text/csv")
    assert "attachment" in download.headers["content-disposition"]

    refused = teacher.get(f"{map_path}.csv?table=everything")
    assert 400 <= refused.status_code < 500 and "table" in refused.text
    assert teacher.get(f"/courses/{course_id}/exercises/no-such/map").status_code == 404
    assert _client(client, "ann@example.org").get(map_path).status_code == 403
    assert _client(client, "outsider@example.org").get(f"{map_path}.csv").status_code == 404
    stats = teacher.get(f"/courses/{course_id}/exercises/{EXERCISE}/stats").text
    assert f'href="{map_path}"' in stats
