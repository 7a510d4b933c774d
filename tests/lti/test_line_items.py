"""AGS line items and results against the fake platform, which speaks them per the spec:
media types checked, pages of at most two with Link: rel="next", the spec's filters."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from app.db import SessionFactory
from app.lti.ags import AccessTokens, DeliveryOutcome, deliver_score
from app.lti.keys import key_sealing
from app.lti.line_items import (
    LINE_ITEM_TAG,
    create_line_item,
    list_line_items,
    read_results,
)
from app.lti.models import LtiContext, LtiPlatform, LtiResourceLink
from app.settings import Settings
from tests.app.conftest import loopgrade
from tests.lti.conftest import Launch
from tests.lti.fake_platform import AGS, FakePlatform, RecordedScore
from tests.lti.test_ags import graded_submission, message_for


@pytest.fixture
def launched_without_line_item(launch: Launch, platform: FakePlatform) -> None:
    """A link placed by hand: the AGS claim has the course's container but no line item."""
    platform.claims_override[AGS + "claim/endpoint"] = {
        "scope": [AGS + "scope/score", AGS + "scope/lineitem", AGS + "scope/result.readonly"],
        "lineitems": f"{platform.url}/lineitems?course=7",
    }
    assert launch().status_code == 303


def test_a_link_without_line_item_gets_one_made_once(
    launched_without_line_item: None,
    platform: FakePlatform,
    sessions: SessionFactory,
    settings: Settings,
) -> None:
    message = message_for(sessions, graded_submission(sessions, 6.0))
    assert message["lineitem_url"] is None
    tokens = AccessTokens()
    with sessions.begin() as session:
        outcome = deliver_score(session, key_sealing(settings), tokens, message)
    assert outcome is DeliveryOutcome.DELIVERED
    ((number, item),) = platform.line_items.items()
    assert (item["resourceId"], item["resourceLinkId"], item["tag"]) == (
        "train-step",
        "link-1",
        LINE_ITEM_TAG,
    )
    assert item["scoreMaximum"] == 10.0 and item["label"] == "Train step"
    assert platform.scores[number]["learner-1"].score_given == 6.0
    with sessions() as session:
        (link,) = session.scalars(select(LtiResourceLink))
        assert link.lineitem_url == platform.lineitem_url(number)

    # A retry whose first answer was lost (the link never kept the URL): found, not made again.
    with sessions.begin() as session:
        (link,) = session.scalars(select(LtiResourceLink))
        link.lineitem_url = None
    with sessions.begin() as session:
        deliver_score(session, key_sealing(settings), tokens, message)
    assert platform.line_item_posts == 1
    # Later scores go to the kept line item directly.
    later = message_for(sessions, graded_submission(sessions, 9.0))
    assert later["lineitem_url"] == platform.lineitem_url(number)


def test_line_items_are_listed_through_every_page_and_filtered(
    launched_without_line_item: None,
    platform: FakePlatform,
    sessions: SessionFactory,
    settings: Settings,
) -> None:
    tokens, sealing = AccessTokens(), key_sealing(settings)
    with sessions.begin() as session:
        (context,) = session.scalars(select(LtiContext))
        made = [
            create_line_item(
                session,
                sealing,
                tokens,
                context,
                label=f"Column {n}",
                score_maximum=10.0,
                resource_id=f"exercise-{n % 2}",
                resource_link_id=None,
            )
            for n in range(5)
        ]
        # Five items, pages of two: three pages, followed by rel="next".
        listed = list_line_items(session, sealing, tokens, context)
        assert [item.url for item in listed] == [item.url for item in made]
        assert [item.label for item in listed] == [f"Column {n}" for n in range(5)]
        one_a_page = list_line_items(session, sealing, tokens, context, limit=1)
        assert len(one_a_page) == 5
        odd = list_line_items(session, sealing, tokens, context, resource_id="exercise-1")
        assert [item.label for item in odd] == ["Column 1", "Column 3"]
        assert list_line_items(session, sealing, tokens, context, tag="other") == []
    # The platform saw the spec's media type on each POST (it answers 415 otherwise).
    assert platform.line_item_posts == 5


def test_results_are_read_through_every_page(
    launched_without_line_item: None,
    platform: FakePlatform,
    sessions: SessionFactory,
    settings: Settings,
) -> None:
    message = message_for(sessions, graded_submission(sessions, 4.0))
    tokens, sealing = AccessTokens(), key_sealing(settings)
    with sessions.begin() as session:
        deliver_score(session, sealing, tokens, message)
    (number,) = platform.line_items
    add_scores(platform, number, {"learner-2": 7.0, "learner-3": 10.0})
    with sessions() as session:
        lms = session.scalars(select(LtiPlatform)).one()
        results = read_results(session, sealing, tokens, lms, platform.lineitem_url(number))
        assert {(r.user_id, r.result_score, r.result_maximum) for r in results} == {
            ("learner-1", 4.0, 10.0),
            ("learner-2", 7.0, 10.0),
            ("learner-3", 10.0, 10.0),
        }
        (only,) = read_results(
            session, sealing, tokens, lms, platform.lineitem_url(number), user_id="learner-3"
        )
        assert only.result_score == 10.0


def test_every_service_call_gets_a_fresh_token_once_when_the_platform_dropped_its_own(
    launched_without_line_item: None,
    platform: FakePlatform,
    sessions: SessionFactory,
    settings: Settings,
) -> None:
    """A platform may revoke access tokens before they expire (a restart, a key rotation):
    the tool's cached token is then refused with 401, and each call asks for a new one once,
    for line items, results and scores alike."""
    tokens, sealing = AccessTokens(), key_sealing(settings)
    message = message_for(sessions, graded_submission(sessions, 5.0))
    with sessions.begin() as session:
        (context,) = session.scalars(select(LtiContext))
        lms = session.scalars(select(LtiPlatform)).one()
        assert deliver_score(session, sealing, tokens, message) is DeliveryOutcome.DELIVERED
        (number,) = platform.line_items
        calls = [
            lambda: create_line_item(
                session, sealing, tokens, context,
                label="Extra", score_maximum=5.0, resource_id="extra", resource_link_id=None,
            ),
            lambda: list_line_items(session, sealing, tokens, context),
            lambda: read_results(session, sealing, tokens, lms, platform.lineitem_url(number)),
            lambda: deliver_score(session, sealing, tokens, message),
        ]  # fmt: skip
        for call in calls:
            call()  # the scopes' tokens are cached now
            with platform._lock:
                platform._access_tokens.clear()
            issued = len(platform.token_scopes)
            assert call(), "the call answered nothing after its token was dropped"
            assert len(platform.token_scopes) == issued + 1
    assert {item["label"] for item in platform.line_items.values()} >= {"Extra"}


def test_the_cli_lists_line_items_and_reconciles_the_gradebook(
    launched_without_line_item: None,
    platform: FakePlatform,
    sessions: SessionFactory,
    settings: Settings,
) -> None:
    message = message_for(sessions, graded_submission(sessions, 8.0))
    with sessions.begin() as session:
        deliver_score(session, key_sealing(settings), AccessTokens(), message)
        course_id = session.scalars(select(LtiContext.course_id)).one()
    (number,) = platform.line_items
    # Someone changed a grade in the LMS, and an LMS user never opened the tool.
    add_scores(platform, number, {"learner-1": 5.0, "stranger-4": 3.0})
    listed = loopgrade("lti", "lineitems", "--course", course_id, data_dir=settings.data_dir)
    assert listed.returncode == 0, listed.stderr
    assert "Train step  max 10.0  resource train-step  link link-1  tag loopgrade" in listed.stdout
    reconciled = loopgrade("lti", "results", "--course", course_id, data_dir=settings.data_dir)
    assert reconciled.returncode == 0, reconciled.stderr
    lines = sorted(reconciled.stdout.splitlines())
    assert lines == [
        "train-step  Person learner-1  LMS 5/10  loopgrade 8/10  DIFFERS",
        "train-step  stranger-4  LMS 3/10  loopgrade -  DIFFERS",
    ]


def add_scores(platform: FakePlatform, item: str, scores: dict[str, float]) -> None:
    """Scores set in the LMS itself (by hand, or by another tool)."""
    for user_id, score in scores.items():
        platform.scores.setdefault(item, {})[user_id] = RecordedScore(
            user_id, score, 10.0, datetime.now(UTC), "FullyGraded", "Completed"
        )
