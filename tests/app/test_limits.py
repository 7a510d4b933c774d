"""Abuse-proof limits: sign-in keyed so a stranger cannot lock the owner out, anonymous practice
and sign-up limited per client address and from all, a capped queue answering 503 with
Retry-After.

Client addresses come from X-Forwarded-For through a server that trusts a proxy on 127.0.0.1
(`proxied_client`); the plain `client` shows the header is believed from no one by default.
"""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy import select, update

from app.access import KNOWN_BROWSER_COOKIE, SESSION_COOKIE
from app.db import SessionFactory
from app.models import SignInFailure, SignUp, Submission, SubmissionStatus, User, utc_now
from app.settings import Settings
from tests.app.conftest import EXERCISE, csrf_token
from tests.app.people import PASSWORD, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS

OWNER, STRANGER, OTHERS = "198.51.100.7", "203.0.113.9", "192.0.2.{}"
# No train_step: graded at once, and cheaply (a syntax error is refused before grading).
BAD_CODE = "def other_step(model, optimizer, loss_fn, x, y):\n    return 0.0\n"


def from_address(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


def fail_sign_in(client: httpx.Client, email: str, address: str) -> httpx.Response:
    return sign_in(client, email, "not the password", headers=from_address(address))


def test_a_stranger_cannot_lock_the_owner_out(
    proxied_client: httpx.Client, sessions: SessionFactory, proxied_settings: Settings
) -> None:
    make_user(sessions, "kim@example.org")
    for _ in range(proxied_settings.sign_in_max_failures):
        assert fail_sign_in(proxied_client, "kim@example.org", STRANGER).status_code == 401
    # The stranger is paused for Kim's account, even with the right password...
    paused = sign_in(proxied_client, "kim@example.org", headers=from_address(STRANGER))
    assert paused.status_code == 429 and "Retry-After" in paused.headers
    assert "to this account from your network" in paused.text
    # ...and Kim, from her own address, is not.
    proxied_client.cookies.clear()
    owner = sign_in(proxied_client, "kim@example.org", headers=from_address(OWNER))
    assert owner.status_code == 303


def test_one_address_trying_many_accounts_is_paused_for_all(
    proxied_client: httpx.Client, sessions: SessionFactory, proxied_settings: Settings
) -> None:
    per_address = proxied_settings.sign_in_max_failures * 5
    emails = [f"user{n}@example.org" for n in range(per_address // 4)]
    for n in range(per_address):
        response = fail_sign_in(proxied_client, emails[n % len(emails)], STRANGER)
        assert response.status_code == 401, n
    make_user(sessions, "new@example.org")
    paused = sign_in(proxied_client, "new@example.org", headers=from_address(STRANGER))
    assert paused.status_code == 429 and "from your network" in paused.text
    assert (
        sign_in(proxied_client, "new@example.org", headers=from_address(OWNER)).status_code == 303
    )


def test_the_account_brake_holds_many_addresses_but_not_the_owners_browser(
    proxied_client: httpx.Client, sessions: SessionFactory, proxied_settings: Settings
) -> None:
    proxied_settings.sign_in_account_max_failures = 3
    make_user(sessions, "ada@example.org")
    # Ada signed in here before: her browser keeps a cookie that says so.
    assert (
        sign_in(proxied_client, "ada@example.org", headers=from_address(OWNER)).status_code == 303
    )
    assert KNOWN_BROWSER_COOKIE in proxied_client.cookies
    known = proxied_client.cookies[KNOWN_BROWSER_COOKIE]

    with httpx.Client(
        base_url=str(proxied_client.base_url), timeout=HTTP_TIMEOUT_SECONDS
    ) as botnet:
        for n in range(3):
            assert fail_sign_in(botnet, "ada@example.org", OTHERS.format(n)).status_code == 401
        # A fourth address, even with the right password, is held by the account's brake.
        held = sign_in(botnet, "ada@example.org", headers=from_address(OTHERS.format(9)))
        assert held.status_code == 429 and "from many places" in held.text
        # A forged cookie does not pass for Ada's browser.
        botnet.cookies.set(KNOWN_BROWSER_COOKIE, "0" * len(known))
        forged = sign_in(botnet, "ada@example.org", headers=from_address(OTHERS.format(9)))
        assert forged.status_code == 429

    proxied_client.cookies.delete(SESSION_COOKIE)
    again = sign_in(proxied_client, "ada@example.org", headers=from_address(OWNER))
    assert again.status_code == 303


def test_x_forwarded_for_and_proto_are_believed_from_no_one_by_default(
    client: httpx.Client, sessions: SessionFactory, settings: Settings
) -> None:
    make_user(sessions, "lee@example.org")
    for n in range(settings.sign_in_max_failures):
        assert fail_sign_in(client, "lee@example.org", OTHERS.format(n)).status_code == 401
    # Each failure named another address, but all came from 127.0.0.1: all count together.
    assert sign_in(client, "lee@example.org", headers=from_address(OWNER)).status_code == 429

    make_user(sessions, "sam@example.org")
    response = sign_in(client, "sam@example.org", headers={"X-Forwarded-Proto": "https"})
    assert response.status_code == 303
    assert all("Secure" not in h for h in response.headers.get_list("set-cookie"))


def submit_anonymously(client: httpx.Client, address: str) -> httpx.Response:
    """A practice submission from a browser with no cookies at all (a new one each time)."""
    client.cookies.clear()
    page = f"/exercises/{EXERCISE}"
    return client.post(
        page,
        data={"code": BAD_CODE, "csrf_token": csrf_token(client, page)},
        headers=from_address(address),
    )


def test_anonymous_practice_is_limited_per_address_without_its_cookie(
    proxied_client: httpx.Client, sessions: SessionFactory, proxied_settings: Settings
) -> None:
    proxied_settings.anonymous_submission_rate_limit = 2
    for _ in range(2):
        assert submit_anonymously(proxied_client, STRANGER).status_code == 303
    refused = submit_anonymously(proxied_client, STRANGER)
    assert refused.status_code == 429
    assert (
        0 < int(refused.headers["Retry-After"]) <= proxied_settings.submission_rate_window_seconds
    )
    assert "Practice from your address" in refused.text and 'class="form-error"' in refused.text
    # Another address is not held up, and neither is a signed-in learner at the stranger's.
    assert submit_anonymously(proxied_client, OWNER).status_code == 303
    make_user(sessions, "kim@example.org")
    proxied_client.cookies.clear()
    assert (
        sign_in(proxied_client, "kim@example.org", headers=from_address(STRANGER)).status_code
        == 303
    )
    page = f"/exercises/{EXERCISE}"
    signed_in = proxied_client.post(
        page,
        data={"code": BAD_CODE, "csrf_token": csrf_token(proxied_client, page)},
        headers=from_address(STRANGER),
    )
    assert signed_in.status_code == 303
    with sessions() as session:
        addresses = session.scalars(select(Submission.client_address)).all()
    assert sorted(addresses, key=str) == sorted([STRANGER, STRANGER, OWNER, None], key=str)


def test_anonymous_practice_is_limited_from_all_addresses_together(
    proxied_client: httpx.Client, sessions: SessionFactory, proxied_settings: Settings
) -> None:
    proxied_settings.anonymous_submissions_per_hour_in_total = 3
    for n in range(3):
        assert submit_anonymously(proxied_client, OTHERS.format(n)).status_code == 303
    refused = submit_anonymously(proxied_client, OTHERS.format(9))
    assert refused.status_code == 429 and 0 < int(refused.headers["Retry-After"]) <= 3600
    assert "Practice without an account has reached" in refused.text
    with sessions() as session:
        assert len(session.scalars(select(Submission.id)).all()) == 3
    # Learners with an account are not held up by strangers' practice.
    make_user(sessions, "kim@example.org")
    proxied_client.cookies.clear()
    sign_in(proxied_client, "kim@example.org", headers=from_address(OTHERS.format(9)))
    page = f"/exercises/{EXERCISE}"
    signed_in = proxied_client.post(
        page,
        data={"code": BAD_CODE, "csrf_token": csrf_token(proxied_client, page)},
        headers=from_address(OTHERS.format(9)),
    )
    assert signed_in.status_code == 303


def sign_up(client: httpx.Client, email: str, address: str) -> httpx.Response:
    client.cookies.clear()
    token = token_of(client.get("/sign-up"))
    return client.post(
        "/sign-up",
        data={"csrf_token": token, "email": email, "name": "", "password": PASSWORD},
        headers=from_address(address),
    )


def test_sign_ups_are_limited_per_address_and_from_all_and_swept(
    proxied_client: httpx.Client, sessions: SessionFactory, proxied_settings: Settings
) -> None:
    proxied_settings.sign_up_max_per_address = 2
    proxied_settings.sign_up_max = 3
    for n in range(2):
        assert sign_up(proxied_client, f"s{n}@example.org", STRANGER).status_code == 303
    paused = sign_up(proxied_client, "s9@example.org", STRANGER)
    assert paused.status_code == 429 and "from your network" in paused.text
    assert 0 < int(paused.headers["Retry-After"]) <= proxied_settings.sign_up_window_seconds
    # A campus next door may, until all addresses together made the most allowed.
    assert sign_up(proxied_client, "o1@example.org", OWNER).status_code == 303
    full = sign_up(proxied_client, "o2@example.org", OTHERS.format(1))
    assert full.status_code == 503 and "Retry-After" in full.headers
    with sessions() as session:
        emails = set(session.scalars(select(User.email)))
        assert emails == {"s0@example.org", "s1@example.org", "o1@example.org"}
    # Once the window has passed they count no more, and are swept at the next sign-up.
    with sessions.begin() as session:
        session.execute(
            update(SignUp).values(
                signed_up_at=utc_now()
                - timedelta(seconds=proxied_settings.sign_up_window_seconds + 1)
            )
        )
    assert sign_up(proxied_client, "s9@example.org", STRANGER).status_code == 303
    with sessions() as session:
        assert session.scalars(select(SignUp.client_address)).all() == [STRANGER]


def test_sign_in_failures_out_of_every_window_are_swept_without_a_success(
    proxied_client: httpx.Client, sessions: SessionFactory, proxied_settings: Settings
) -> None:
    for n in range(3):
        assert (
            fail_sign_in(proxied_client, f"u{n}@example.org", OTHERS.format(n)).status_code == 401
        )
    longest = max(
        proxied_settings.sign_in_window_seconds, proxied_settings.sign_in_account_window_seconds
    )
    with sessions.begin() as session:
        session.execute(
            update(SignInFailure).values(failed_at=utc_now() - timedelta(seconds=2 * longest + 1))
        )
    assert fail_sign_in(proxied_client, "u9@example.org", STRANGER).status_code == 401
    with sessions() as session:
        assert session.scalars(select(SignInFailure.client_ip)).all() == [STRANGER]


def fill_queue(sessions: SessionFactory, count: int) -> None:
    """`count` submissions waiting, as if the graders were far behind."""
    with sessions.begin() as session:
        for n in range(count):
            session.add(
                Submission(
                    exercise_id=EXERCISE,
                    exercise_version="v-test",
                    learner=f"waiting-{n}",
                    code=BAD_CODE,
                    status=SubmissionStatus.QUEUED,
                    attempts=0,
                )
            )


def test_a_full_queue_answers_503_with_retry_after_and_says_so(
    client: httpx.Client,
    sessions: SessionFactory,
    settings: Settings,
    auth: dict[str, str],
) -> None:
    settings.max_waiting_submissions = 4
    fill_queue(sessions, 2)
    # Half full: anonymous practice waits, so that courses and the API keep room.
    page = f"/exercises/{EXERCISE}"
    busy = client.post(page, data={"code": BAD_CODE, "csrf_token": csrf_token(client, page)})
    assert busy.status_code == 503 and int(busy.headers["Retry-After"]) > 0
    assert "The graders are busy" in busy.text and 'class="form-error"' in busy.text
    assert BAD_CODE.strip() in busy.text  # the learner's code is still in the editor
    body = {"exercise": EXERCISE, "learner": "api-learner", "code": BAD_CODE}
    assert client.post("/api/v1/submissions", json=body, headers=auth).status_code == 202

    fill_queue(sessions, 2)
    full = client.post("/api/v1/submissions", json=body, headers=auth)
    assert full.status_code == 503 and int(full.headers["Retry-After"]) > 0
    assert "The graders are busy" in full.json()["detail"]
    with sessions() as session:
        stored = session.scalars(select(Submission).where(Submission.learner == "api-learner"))
        assert len(stored.all()) == 1  # a refused submission is not stored


def test_one_waiting_submission_is_said_in_the_singular(
    client: httpx.Client, sessions: SessionFactory, settings: Settings, auth: dict[str, str]
) -> None:
    settings.max_waiting_submissions = 1
    fill_queue(sessions, 1)
    body = {"exercise": EXERCISE, "learner": "api-learner", "code": BAD_CODE}
    full = client.post("/api/v1/submissions", json=body, headers=auth)
    assert full.status_code == 503
    assert "The graders are busy: 1 submission is waiting to be graded." in full.json()["detail"]


def test_an_ipv6_client_is_its_64_network_and_a_forged_hop_is_not_believed(
    proxied_client: httpx.Client, sessions: SessionFactory, proxied_settings: Settings
) -> None:
    make_user(sessions, "jo@example.org")
    # Every failure from another address of one /64: one client, as limits count it.
    for n in range(proxied_settings.sign_in_max_failures):
        assert (
            fail_sign_in(proxied_client, "jo@example.org", f"2001:db8:1:2::{n + 1:x}").status_code
            == 401
        )
    paused = sign_in(proxied_client, "jo@example.org", headers=from_address("2001:db8:1:2:ffff::9"))
    assert paused.status_code == 429
    # A client cannot pass for another by writing its own hop in front: the proxy appends
    # the real one, and the right-most untrusted address counts.
    forged = sign_in(
        proxied_client, "jo@example.org", headers=from_address(f"{OWNER}, 2001:db8:1:2::77")
    )
    assert forged.status_code == 429
    assert (
        sign_in(proxied_client, "jo@example.org", headers=from_address("2001:db8:9::1")).status_code
        == 303
    )
