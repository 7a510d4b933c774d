"""Names that look like no one else's, and gradebook exports that never run a formula."""

from __future__ import annotations

import csv
import io

import httpx
import pytest
from sqlalchemy import select

from app.db import SessionFactory
from app.models import SiteRole, User
from app.people.names import hidden_character, normalize_display_name
from tests.app.conftest import EXERCISE
from tests.app.people import graded, make_course, make_user, sign_in, token_of


@pytest.mark.parametrize(
    ("typed", "kept"),
    [
        (
            "\uff21\uff4c\uff49\uff43\uff45\u3000\uff33\uff4d\uff49\uff54\uff48",
            "Alice Smith",
        ),  # full-width letters and space
        ("  Ada \t Lovelace\n", "Ada Lovelace"),
        ("\ufb01ona", "fiona"),  # a ligature
        ("José Núñez", "José Núñez"),  # composed the one way NFKC composes
        ("Jose\u0301", "José"),
        (
            "\u0645\u062d\u0645\u062f\u200c\u0631\u0636\u0627",
            "\u0645\u062d\u0645\u062f\u200c\u0631\u0636\u0627",
        ),  # a Persian name's non-joiner is part of it
    ],
)
def test_a_name_is_kept_in_one_form(typed: str, kept: str) -> None:
    name = normalize_display_name(typed)
    assert name == kept
    assert hidden_character(name) is None


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("Ali\u202ece", "U+202E RIGHT-TO-LEFT OVERRIDE at character 4"),
        ("Al\u2066ice", "LEFT-TO-RIGHT ISOLATE"),
        ("Ali\u200bce", "ZERO WIDTH SPACE"),
        ("Ali\u200cce", "ZERO WIDTH NON-JOINER"),  # between Latin letters it only hides
        ("\u3164", "HANGUL"),  # the filler that makes a blank-looking name
        ("Alice\ufe0f", "VARIATION SELECTOR-16"),
        ("Alice\U000e0041", "TAG LATIN CAPITAL LETTER A"),
        ("Alice\u00ad", "SOFT HYPHEN"),
        ("Alice\u2800", "BRAILLE PATTERN BLANK"),
        ("Alice\ue000", "U+E000"),  # private use
        ("Alice\u0378", "U+0378"),  # unassigned
        ("Z\u0301\u0302\u0303\u0304\u0305algo", "4 combining marks"),
    ],
)
def test_a_name_that_hides_or_reorders_text_is_refused(name: str, what: str) -> None:
    found = hidden_character(normalize_display_name(name))
    assert found is not None and what in found


def sign_up(client: httpx.Client, email: str, name: str) -> httpx.Response:
    token = token_of(client.get("/sign-up"))
    return client.post(
        "/sign-up",
        data={"csrf_token": token, "email": email, "name": name, "password": "long enough pw"},
    )


def test_sign_up_normalises_the_name_and_refuses_a_hiding_one(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    assert sign_up(client, "alice@example.org", "\uff21\uff4c\uff49\uff43\uff45").status_code == 303
    client.cookies.clear()
    refused = sign_up(client, "eve@example.org", "Ali\u202ece")
    assert refused.status_code == 422
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in refused.text and 'role="alert"' in refused.text
    hidden_email = sign_up(client, "e\u200bve@example.org", "Eve")
    assert hidden_email.status_code == 422 and "ZERO WIDTH SPACE" in hidden_email.text
    with sessions() as session:
        assert [user.name for user in session.scalars(select(User))] == ["Alice"]


def test_an_api_learner_id_that_hides_text_is_refused(
    client: httpx.Client, auth: dict[str, str]
) -> None:
    body = {"exercise": EXERCISE, "learner": "learner-\u202e9", "code": "x = 1\n"}
    response = client.post("/api/v1/submissions", json=body, headers=auth)
    assert response.status_code == 422
    assert "RIGHT-TO-LEFT OVERRIDE" in response.json()["detail"]


FORMULAS = [
    '=HYPERLINK("http://evil.example")',
    " =1+1",  # after a space
    "\u3000+1",  # after an ideographic space
    "\u200b@SUM(1)",  # after a zero-width space (a row stored before names were checked)
    "\uff1dcmd",  # full-width =
    "\ufe62cmd",  # small +
    "\uff0d1",  # full-width -
    "\t-1",
]


def test_the_csv_quotes_every_cell_a_spreadsheet_would_run(
    client: httpx.Client, sessions: SessionFactory
) -> None:
    make_user(sessions, "teacher@example.org", SiteRole.INSTRUCTOR)
    course_id = make_course(sessions, "teacher@example.org")
    for learner in [*FORMULAS, "plain-learner"]:
        graded(sessions, user_id=None, course_id=course_id, score=1, learner=learner)
    sign_in(client, "teacher@example.org")
    exported = client.get(f"/courses/{course_id}/gradebook.csv")
    assert exported.status_code == 200
    cells = {row[0] for row in list(csv.reader(io.StringIO(exported.text)))[1:]}
    assert cells == {"'" + learner for learner in FORMULAS} | {"plain-learner"}
