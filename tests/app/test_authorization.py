"""Who may see what: a learner sees only their own submissions and no instructor page, through
the pages and the API alike; an API key sees only its course."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

import app.lti
import app.web
from app.access import require_csrf, require_csrf_header
from app.api_keys import create_api_key
from app.db import SessionFactory
from app.models import Assignment, Course, SiteRole, utc_now
from app.settings import Settings
from tests.app.conftest import CORRECT_CODE, EXERCISE
from tests.app.people import graded, make_course, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS

SECRET_CODE = "def train_step(model, optimizer, loss_fn, x, y):\n    return 'ANNS-OWN-CODE'\n"


@pytest.fixture
def course(sessions: SessionFactory) -> dict[str, str]:
    """A course: a teacher, learners Ann (with a submission) and Ben; Cy is not in it."""
    ids = {
        "teacher": make_user(sessions, "teacher@example.org", SiteRole.INSTRUCTOR),
        "ann": make_user(sessions, "ann@example.org"),
        "ben": make_user(sessions, "ben@example.org"),
        "cy": make_user(sessions, "cy@example.org"),
    }
    ids["course"] = make_course(
        sessions, "teacher@example.org", "ann@example.org", "ben@example.org"
    )
    ids["submission"] = graded(
        sessions,
        user_id=ids["ann"],
        course_id=ids["course"],
        score=4,
        learner="ann@example.org",
        code=SECRET_CODE,
    )
    return ids


def browser(client: httpx.Client, email: str) -> httpx.Client:
    other = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(other, email).status_code == 303
    return other


def instructor_paths(course_id: str, submission_id: str) -> list[str]:
    return [
        f"/courses/{course_id}/gradebook",
        f"/courses/{course_id}/gradebook.csv",
        f"/courses/{course_id}/exercises/{EXERCISE}/stats",
        f"/courses/{course_id}/exercises/{EXERCISE}/map",
        f"/courses/{course_id}/exercises/{EXERCISE}/map.csv",
        f"/courses/{course_id}/submissions",
        f"/courses/{course_id}/settings",
        f"/courses/{course_id}/audit",
    ]


def test_a_learner_sees_their_own_submission(client: httpx.Client, course: dict[str, str]) -> None:
    ann = browser(client, "ann@example.org")
    page = ann.get(f"/submissions/{course['submission']}")
    assert page.status_code == 200 and "ANNS-OWN-CODE" in page.text
    assert "Override the score" not in page.text and "Sandbox limits" not in page.text
    assert ann.get(f"/submissions/{course['submission']}/result").status_code == 200
    history = ann.get("/history")
    assert course["submission"] in history.text


def test_another_learner_cannot_read_it_through_any_page(
    client: httpx.Client, course: dict[str, str]
) -> None:
    submission = course["submission"]
    for who in ("ben@example.org", "cy@example.org"):
        other = browser(client, who)
        for path in (f"/submissions/{submission}", f"/submissions/{submission}/result"):
            response = other.get(path)
            assert response.status_code == 404, (who, path)
            assert "ANNS-OWN-CODE" not in response.text
        # Nor by asking to edit it: the editor gets the starter code instead.
        edit = other.get(f"/exercises/{EXERCISE}?edit={submission}")
        assert "ANNS-OWN-CODE" not in edit.text
        assert submission not in other.get("/history").text
    # Nor anonymously.
    anonymous = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert anonymous.get(f"/submissions/{submission}").status_code == 404


def test_a_learner_gets_403_on_instructor_pages_and_outsiders_404(
    client: httpx.Client, course: dict[str, str]
) -> None:
    ben, cy = browser(client, "ben@example.org"), browser(client, "cy@example.org")
    for path in instructor_paths(course["course"], course["submission"]):
        assert ben.get(path).status_code == 403, path
        assert cy.get(path).status_code == 404, path
    assert cy.get(f"/courses/{course['course']}").status_code == 404
    assert cy.get(f"/courses/{course['course']}/exercises/{EXERCISE}").status_code == 404

    # Forms too, with a valid token of the learner's own.
    token = token_of(ben.get("/"))
    posts = {
        f"/submissions/{course['submission']}/override": {"score": "10", "reason": "mine now"},
        f"/submissions/{course['submission']}/regrade": {},
        f"/courses/{course['course']}/exercises/{EXERCISE}/regrade": {"which": "all"},
        f"/courses/{course['course']}/exercises/{EXERCISE}/regrade/dry-run": {"which": "all"},
        f"/courses/{course['course']}/settings": {
            "exercise": EXERCISE,
            "due_at": "",
            "late_policy": "penalty",
            "late_penalty_percent_per_day": "0",
            "scoring_policy": "best",
            "instructor_email": "ben@example.org",
            "new_join_code": "1",
        },
    }
    for path, data in posts.items():
        assert ben.post(path, data={**data, "csrf_token": token}).status_code in (403, 404), path
    # Ann cannot override her own score either.
    ann = browser(client, "ann@example.org")
    own = ann.post(
        f"/submissions/{course['submission']}/override",
        data={"score": "10", "reason": "x", "csrf_token": token_of(ann.get("/"))},
    )
    assert own.status_code == 403

    # Signed out: sent to sign in, and brought back afterwards.
    anonymous = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    redirect = anonymous.get(f"/courses/{course['course']}/gradebook")
    assert redirect.status_code == 303
    assert redirect.headers["location"].startswith("/sign-in?next=%2Fcourses%2F")


def test_the_instructor_sees_and_reviews_it(client: httpx.Client, course: dict[str, str]) -> None:
    teacher = browser(client, "teacher@example.org")
    page = teacher.get(f"/submissions/{course['submission']}")
    assert page.status_code == 200
    assert "ANNS-OWN-CODE" in page.text and "Override the score" in page.text
    assert "Sandbox limits" in page.text and "ann@example.org" in page.text
    for path in instructor_paths(course["course"], course["submission"]):
        assert teacher.get(path).status_code == 200, path


def test_api_keys_see_only_their_course(
    client: httpx.Client, course: dict[str, str], sessions: SessionFactory
) -> None:
    with sessions.begin() as session:
        other_course = Course(name="Other", join_code="OTHER234")
        session.add(other_course)
        session.flush()
        _, own_key = create_api_key(session, name="lms", course_id=course["course"])
        _, other_key = create_api_key(session, name="other-lms", course_id=other_course.id)
        _, old_key = create_api_key(session, name="from-before-courses")
    url = f"/api/v1/submissions/{course['submission']}"

    def get(path: str, key: str) -> httpx.Response:
        return client.get(path, headers={"Authorization": f"Bearer {key}"})

    assert get(url, own_key).status_code == 200
    assert get(url, own_key).json()["learner"] == "ann@example.org"
    for key in (other_key, old_key):
        response = get(url, key)
        assert response.status_code == 404
        assert "ANNS" not in response.text and "4" not in str(response.json().get("score"))
        listed = get("/api/v1/submissions", key)
        assert listed.status_code == 200 and listed.json() == []
    assert [s["id"] for s in get("/api/v1/submissions", own_key).json()] == [course["submission"]]

    book = get("/api/v1/gradebook", own_key).json()
    assert {row["email"] for row in book["rows"]} == {"ann@example.org", "ben@example.org"}
    assert get("/api/v1/gradebook", other_key).json()["rows"] == []
    assert get("/api/v1/gradebook", old_key).status_code == 403

    # A learner's practice outside any course is theirs alone, even for a key of no course.
    practice = graded(sessions, user_id=course["ann"], course_id=None, score=10)
    assert get(f"/api/v1/submissions/{practice}", old_key).status_code == 404
    assert get(f"/api/v1/submissions/{practice}", own_key).status_code == 404

    # A signed-in learner's cookie is no key.
    ann = browser(client, "ann@example.org")
    assert ann.get(url).status_code == 401
    assert ann.get("/api/v1/gradebook").status_code == 401


def test_a_course_key_submits_into_its_course_only_for_set_exercises(
    client: httpx.Client, course: dict[str, str], sessions: SessionFactory
) -> None:
    with sessions.begin() as session:
        _, key = create_api_key(session, name="lms", course_id=course["course"])
        session.query(Assignment).filter_by(
            course_id=course["course"], exercise_id="fix-the-loop"
        ).delete()
    auth = {"Authorization": f"Bearer {key}"}
    unset = client.post(
        "/api/v1/submissions",
        headers=auth,
        json={"exercise": "fix-the-loop", "learner": "x@example.org", "code": CORRECT_CODE},
    )
    assert unset.status_code == 422
    assert "not set in this key's course" in unset.json()["detail"]
    assert "train-step" in unset.json()["detail"]


def test_rate_limit_answers_429_with_retry_after_on_page_and_api(
    client: httpx.Client, course: dict[str, str], sessions: SessionFactory, settings: Settings
) -> None:
    settings.submission_rate_limit = 2
    settings.submission_rate_window_seconds = 600
    for _ in range(2):
        graded(
            sessions,
            user_id=course["ben"],
            course_id=course["course"],
            score=0,
            learner="ben@example.org",
        )
    ben = browser(client, "ben@example.org")
    page_path = f"/courses/{course['course']}/exercises/{EXERCISE}"
    page = ben.get(page_path)
    assert "up to 2 submissions per 10 minutes" in page.text
    refused = ben.post(page_path, data={"code": CORRECT_CODE, "csrf_token": token_of(page)})
    assert refused.status_code == 429
    retry_after = int(refused.headers["retry-after"])
    assert 500 < retry_after <= 600
    assert "You have reached the limit of 2 submissions per 10 minutes" in refused.text
    assert f"again in {retry_after} s" in refused.text
    assert "optimizer.zero_grad()" in refused.text  # the code stays in the editor

    with sessions.begin() as session:
        _, key = create_api_key(session, name="lms", course_id=course["course"])
    for _ in range(2):
        graded(sessions, user_id=None, course_id=course["course"], score=0, learner="api-learner")
    api = client.post(
        "/api/v1/submissions",
        headers={"Authorization": f"Bearer {key}"},
        json={"exercise": EXERCISE, "learner": "api-learner", "code": CORRECT_CODE},
    )
    assert api.status_code == 429
    assert int(api.headers["retry-after"]) > 500
    assert "limit of 2 submissions" in api.json()["detail"]


def test_a_locked_exercise_refuses_late_submissions(
    client: httpx.Client, course: dict[str, str], sessions: SessionFactory
) -> None:
    with sessions.begin() as session:
        assignment = (
            session.query(Assignment)
            .filter_by(course_id=course["course"], exercise_id=EXERCISE)
            .one()
        )
        assignment.due_at = utc_now() - timedelta(hours=1)
        assignment.late_policy = "lock"
        _, key = create_api_key(session, name="lms", course_id=course["course"])
    ben = browser(client, "ben@example.org")
    page_path = f"/courses/{course['course']}/exercises/{EXERCISE}"
    page = ben.get(page_path)
    assert "accepts no late submissions" in page.text
    refused = ben.post(page_path, data={"code": CORRECT_CODE, "csrf_token": token_of(page)})
    assert refused.status_code == 403 and "is now closed" in refused.text
    api = client.post(
        "/api/v1/submissions",
        headers={"Authorization": f"Bearer {key}"},
        json={"exercise": EXERCISE, "learner": "late@example.org", "code": CORRECT_CODE},
    )
    assert api.status_code == 403 and "closed" in api.json()["detail"]


def dependency_calls(dependant: Dependant) -> Iterator[Callable[..., Any] | None]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from dependency_calls(sub)


# Forms that check the token themselves: a submission sent after the session ended is kept, not
# refused (app/web/kept_submissions.py); an LTI login and launch come from the LMS's page.
CSRF_CHECKED_IN_THE_ROUTE = {"submit_practice", "submit_in_course", "login_post", "launch"}


def test_every_form_of_the_pages_checks_its_csrf_token_before_the_route_runs() -> None:
    # Permissions are dependencies (app/permissions.py): a form's must be its `...FormDep`,
    # which checks the CSRF token, or a route without `viewer` would check none.
    unchecked = []
    for package in (app.web, app.lti):
        for found in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{found.name}")
            router = getattr(module, "router", None)
            for route in router.routes if router is not None else []:
                if not isinstance(route, APIRoute) or not (route.methods or set()) - {
                    "GET",
                    "HEAD",
                }:
                    continue
                calls = set(dependency_calls(route.dependant))
                if not calls & {require_csrf, require_csrf_header}:
                    unchecked.append(route.endpoint.__name__)
    assert sorted(unchecked) == sorted(CSRF_CHECKED_IN_THE_ROUTE)
