"""AGS line items and results against the fake platform, which speaks them per the spec:
media types checked, pages of at most two with Link: rel="next", the spec's filters."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from app.db import SessionFactory
from app.integrations.ags import DeliveryOutcome, deliver_lti_score, deliver_score
from app.integrations.ags_client import AccessTokens
from app.integrations.keys import key_sealing
from app.integrations.line_items import (
    LINE_ITEM_CLAIM_SECONDS,
    LINE_ITEM_TAG,
    create_line_item,
    list_line_items,
    read_results,
)
from app.integrations.models import LtiContext, LtiPlatform, LtiResourceLink, LtiUser
from app.models import utc_now
from app.outbox import DeliveryDeferred
from app.settings import Settings
from tests.app.conftest import loopgrade
from tests.app.people import graded
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
        calls: list[Callable[[], object]] = [
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


@pytest.fixture
def two_learners_without_line_item(
    launched_without_line_item: None, launch: Launch, platform: FakePlatform
) -> None:
    """A second learner launched the same hand-placed link."""
    platform.subject = "learner-2"
    assert launch().status_code == 303


def first_scores(sessions: SessionFactory) -> list[dict[str, object]]:
    """The score messages of one graded submission each of learner-1 and learner-2, without a
    line item URL: the link has none yet."""
    with sessions() as session:
        course_id = session.scalars(select(LtiContext.course_id)).one()
        users = {
            subject: user_id
            for subject, user_id in session.execute(select(LtiUser.subject, LtiUser.user_id))
        }
    messages = []
    for subject, score in (("learner-1", 6.0), ("learner-2", 8.0)):
        message = message_for(
            sessions, graded(sessions, user_id=users[subject], course_id=course_id, score=score)
        )
        assert message["lineitem_url"] is None
        messages.append(message)
    return messages


def wait_for_line_item_post(platform: FakePlatform) -> None:
    deadline = time.monotonic() + 60
    while platform.line_item_posts == 0:
        assert time.monotonic() < deadline, "the first delivery never POSTed its line item"
        time.sleep(0.05)


def scores_by_column(platform: FakePlatform) -> dict[str, dict[str, float]]:
    return {
        number: {user: score.score_given for user, score in platform.scores.get(number, {}).items()}
        for number in platform.line_items
    }


def set_claim(
    sessions: SessionFactory, *, lapses_in_seconds: float, token: str | None = None
) -> None:
    """Move the link's claim's lapse (time passing), or leave one (a host that died)."""
    with sessions.begin() as session:
        (link,) = session.scalars(select(LtiResourceLink))
        link.lineitem_claim = token or link.lineitem_claim
        assert link.lineitem_claim is not None
        link.lineitem_claimed_until = utc_now() + timedelta(seconds=lapses_in_seconds)


# The outbox's delivery of a score, as each host's delivery loop calls it. The tests call it
# themselves, each call standing for another host: the tool server's own loop is left out
# (the messages are not in its outbox).


def test_two_first_scores_at_once_make_one_column_with_both_scores(
    two_learners_without_line_item: None,
    platform: FakePlatform,
    sessions: SessionFactory,
    settings: Settings,
) -> None:
    """Two hosts deliver the first scores of two learners for one link at the same time: the
    first is held in its line item POST while the second runs. The second is deferred (the
    outbox tries it again, not counted as an attempt) and then goes to the first's column."""
    first, second = first_scores(sessions)
    platform.stall_next_line_item_post = True
    with ThreadPoolExecutor(1) as other_host:
        held = other_host.submit(deliver_lti_score, sessions, settings, first)
        wait_for_line_item_post(platform)
        with pytest.raises(DeliveryDeferred, match="making the link's LMS column") as deferred:
            deliver_lti_score(sessions, settings, second)
        assert 0 < deferred.value.retry_after_seconds <= settings.outbox_retry_base_seconds
        assert platform.line_item_posts == 1 and platform.line_items == {}
        platform.release_stalled.set()
        held.result(timeout=60)
    deliver_lti_score(sessions, settings, second)  # tried again
    assert scores_by_column(platform) == {"1": {"learner-1": 6.0, "learner-2": 8.0}}
    assert platform.line_item_posts == 1
    with sessions() as session:
        (link,) = session.scalars(select(LtiResourceLink))
        assert link.lineitem_url == platform.lineitem_url("1")
        assert (link.lineitem_claim, link.lineitem_claimed_until) == (None, None)


def test_a_lapsed_claim_still_ends_with_one_column_and_both_scores(
    two_learners_without_line_item: None,
    platform: FakePlatform,
    sessions: SessionFactory,
    settings: Settings,
) -> None:
    """The first delivery's POST is held so long that its claim lapses (its host is presumed
    dead): the second makes and keeps the column. When the first's POST is made after all, it
    finds the column kept, deletes the one it made, and puts its score in the kept one."""
    first, second = first_scores(sessions)
    platform.stall_next_line_item_post = True
    with ThreadPoolExecutor(1) as other_host:
        held = other_host.submit(deliver_lti_score, sessions, settings, first)
        wait_for_line_item_post(platform)
        set_claim(sessions, lapses_in_seconds=-1)
        deliver_lti_score(sessions, settings, second)
        assert scores_by_column(platform) == {"1": {"learner-2": 8.0}}
        platform.release_stalled.set()
        held.result(timeout=60)
    # The held POST made line item 2, then deleted it: one column, both scores.
    assert (platform.line_item_posts, platform.line_item_deletes) == (2, 1)
    assert scores_by_column(platform) == {"1": {"learner-1": 6.0, "learner-2": 8.0}}
    with sessions() as session:
        (link,) = session.scalars(select(LtiResourceLink))
        assert link.lineitem_url == platform.lineitem_url("1")


@pytest.mark.parametrize("its_post_arrived", [False, True], ids=["before-post", "answer-lost"])
def test_a_claim_left_by_a_dead_delivery_holds_until_it_lapses(
    its_post_arrived: bool,
    two_learners_without_line_item: None,
    platform: FakePlatform,
    sessions: SessionFactory,
    settings: Settings,
) -> None:
    """A host died holding the link's claim, before its POST left or after the platform made
    the line item: scores wait while the claim stands and, once it has lapsed, the next
    delivery finds that line item or makes one. One column either way, both scores on it."""
    first, second = first_scores(sessions)
    if its_post_arrived:
        with sessions() as session:
            (context,) = session.scalars(select(LtiContext))
            create_line_item(
                session, key_sealing(settings), AccessTokens(), context,
                label="Train step", score_maximum=10.0, resource_id="train-step",
                resource_link_id="link-1",
            )  # fmt: skip
    set_claim(sessions, lapses_in_seconds=LINE_ITEM_CLAIM_SECONDS, token="a-host-that-died")
    with pytest.raises(DeliveryDeferred):
        deliver_lti_score(sessions, settings, first)
    posts_before = platform.line_item_posts
    set_claim(sessions, lapses_in_seconds=-1)
    deliver_lti_score(sessions, settings, first)
    deliver_lti_score(sessions, settings, second)
    assert scores_by_column(platform) == {"1": {"learner-1": 6.0, "learner-2": 8.0}}
    assert platform.line_item_posts == posts_before + (0 if its_post_arrived else 1)
