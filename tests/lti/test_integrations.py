"""The instructor's integrations page: course API keys and webhooks; the keys CLI."""

from __future__ import annotations

import html
import ipaddress
import re
import time

import httpx
import pytest

from app.db import SessionFactory
from app.integrations import webhooks
from app.integrations.webhooks import create_webhook
from app.models import SiteRole
from app.settings import Settings
from tests.app.conftest import loopgrade
from tests.app.people import make_course, make_user, post_form, sign_in
from tests.lti.receiver import Receiver
from tests.servers import HTTP_TIMEOUT_SECONDS


def test_an_instructor_creates_uses_and_revokes_a_course_key(
    tool_url: str, sessions: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_user(sessions, "tess@uni.example", SiteRole.INSTRUCTOR)
    make_user(sessions, "lea@uni.example")
    course_id = make_course(sessions, "tess@uni.example", "lea@uni.example")
    page = f"/courses/{course_id}/integrations"
    with httpx.Client(base_url=tool_url, timeout=HTTP_TIMEOUT_SECONDS) as client:
        assert sign_in(client, "tess@uni.example").status_code == 303
        created = post_form(client, page, f"{page}/keys", {"name": "canvas-prod"})
        assert created.status_code == 200
        match = re.search(r"<code data-new-key>([^<]+)</code>", created.text)
        assert match
        secret = match[1]
        book = client.get("/api/v1/gradebook", headers={"Authorization": f"Bearer {secret}"})
        assert book.status_code == 200
        listing = client.get(page)
        key_id = re.search(rf"/courses/{course_id}/integrations/keys/([^/]+)/revoke", listing.text)
        assert key_id
        revoked = post_form(client, page, f"{page}/keys/{key_id[1]}/revoke", {})
        assert revoked.status_code == 303
        refused = client.get("/api/v1/gradebook", headers={"Authorization": f"Bearer {secret}"})
        assert refused.status_code == 401

        # A webhook to an internal address is refused (the default), with the reason, and so
        # is a name that resolves to one (DNS, outside this machine, answered by a fake).
        hook = post_form(client, page, f"{page}/webhooks", {"url": "https://10.0.0.5/hook"})
        assert hook.status_code == 422 and "private or loopback" in hook.text
        answers = {"hooks.example.com": "93.184.215.14", "internal.example.com": "10.0.0.5"}
        monkeypatch.setattr(
            webhooks, "resolve_host", lambda host: [ipaddress.ip_address(answers[host])]
        )
        hook = post_form(
            client, page, f"{page}/webhooks", {"url": "https://internal.example.com/hook"}
        )
        assert hook.status_code == 422
        assert "internal.example.com resolves to 10.0.0.5" in html.unescape(hook.text)
        hook = post_form(client, page, f"{page}/webhooks", {"url": "https://hooks.example.com/x"})
        assert hook.status_code == 200 and "data-webhook-secret" in hook.text

    with httpx.Client(base_url=tool_url, timeout=HTTP_TIMEOUT_SECONDS) as learner:
        assert sign_in(learner, "lea@uni.example").status_code == 303
        assert learner.get(page).status_code == 403


def test_the_cli_lists_and_revokes_course_keys(
    settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@uni.example", SiteRole.INSTRUCTOR)
    course_id = make_course(sessions, "tess@uni.example")
    created = loopgrade(
        "keys", "create", "moodle", "--course", course_id, data_dir=settings.data_dir
    )
    assert created.returncode == 0, created.stderr
    listed = loopgrade("keys", "list", "--course", course_id, data_dir=settings.data_dir)
    (line,) = listed.stdout.splitlines()
    assert "moodle" in line and line.endswith("live")
    key_id = line.split()[0]
    revoked = loopgrade("keys", "revoke", key_id, data_dir=settings.data_dir)
    assert revoked.returncode == 0, revoked.stderr
    listed = loopgrade("keys", "list", "--course", course_id, data_dir=settings.data_dir)
    assert "revoked" in listed.stdout
    unknown = loopgrade("keys", "revoke", "nope", data_dir=settings.data_dir)
    assert unknown.returncode == 1 and "no API key has the id" in unknown.stderr


def test_a_refused_delivery_is_listed_and_retried_from_the_page(
    tool_url: str, settings: Settings, sessions: SessionFactory, receiver: Receiver
) -> None:
    # The receiver is on loopback, which the server reaches only when the operator allows it.
    settings.webhook_allow_private_addresses = True
    make_user(sessions, "tess@uni.example", SiteRole.INSTRUCTOR)
    course_id = make_course(sessions, "tess@uni.example")
    with sessions.begin() as session:
        webhook = create_webhook(
            session, course_id=course_id, url=receiver.url, allow_private_addresses=True
        )
        receiver.secret, webhook_id = webhook.secret, webhook.id
    receiver.refuse_next = 1
    page = f"/courses/{course_id}/integrations"
    with httpx.Client(base_url=tool_url, timeout=HTTP_TIMEOUT_SECONDS) as client:
        assert sign_in(client, "tess@uni.example").status_code == 303
        sent = post_form(client, page, f"{page}/webhooks/{webhook_id}/test", {})
        assert sent.status_code == 303
        failed = wait_for_state(client, page, "failed")
        assert "HTTP 410" in failed
        delivery_id = re.search(r'data-delivery="(\d+)" data-state="failed"', failed)
        assert delivery_id
        retried = post_form(client, page, f"{page}/deliveries/{delivery_id[1]}/retry", {})
        assert retried.status_code == 303
        wait_for_state(client, page, "delivered")
    assert [event["type"] for event in receiver.events] == ["test"]


def wait_for_state(client: httpx.Client, page: str, state: str) -> str:
    deadline = time.monotonic() + 60
    while True:
        text = client.get(page).text
        if f'data-state="{state}"' in text:
            return text
        assert time.monotonic() < deadline, f"no delivery became {state}"
        time.sleep(0.2)
