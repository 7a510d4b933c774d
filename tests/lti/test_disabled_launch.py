"""An account an administrator disabled is refused at an LMS launch too, and its LMS session
ends."""

from __future__ import annotations

import httpx
from sqlalchemy import select

from app.db import SessionFactory
from app.integrations.models import LtiUser
from app.models import User
from app.people.accounts import disable_user
from tests.lti.conftest import Launch
from tests.lti.test_launch import enter


def test_a_disabled_account_cannot_launch(
    launch: Launch, browser_client: httpx.Client, sessions: SessionFactory
) -> None:
    page = enter(browser_client, launch())
    with sessions.begin() as session:
        user = session.get(User, session.scalars(select(LtiUser.user_id)).one())
        assert user is not None
        disable_user(session, user)
    # The session it had is over.
    assert "Person learner-1" not in browser_client.get(str(page.url)).text

    launched = launch()
    assert launched.status_code == 303
    base = str(launched.request.url).split("/lti/")[0]
    refused = browser_client.get(base + launched.headers["location"])
    assert refused.status_code == 403 and "This account is disabled" in refused.text
