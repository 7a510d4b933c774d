"""Someone else's reading of the spec: the `lti1p3platform` package (an LTI 1.3 platform)
launches the tool, signs the id_token, checks the tool's client assertion at its token
endpoint and its access token at the score endpoint. Launch -> submit -> graded -> score."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from joserfc.jwk import RSAKey
from lti1p3platform.ags import LtiAgs
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import MessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from sqlalchemy import select

from app.db import SessionFactory
from app.integrations.platforms import add_platform
from app.models import Submission
from tests.app.conftest import CORRECT_CODE
from tests.lti.conftest import form_fields
from tests.servers import app_in_thread

CLIENT_ID = "lti1p3platform-client"
DEPLOYMENT_ID = "dep-1"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
WAIT_SECONDS = 180.0


# lti1p3platform ships no py.typed marker, so mypy sees its base classes as Any.
class PlatformConf(LTI1P3PlatformConfAbstract):  # type: ignore[misc]
    def init_platform_config(self, **kwargs: Any) -> None:
        self._registration = kwargs["registration"]

    def get_registration_by_params(self, **kwargs: Any) -> Registration:
        return self._registration


class Login(OIDCLoginAbstract):  # type: ignore[misc]  # no py.typed: Any
    def set_lti_message_hint(self, **kwargs: Any) -> None:
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url: str) -> Response:
        return RedirectResponse(url, status_code=302)


class Launch(MessageLaunchAbstract):  # type: ignore[misc]  # no py.typed: Any
    def get_preflight_response(self) -> dict[str, Any]:
        assert isinstance(self._request, Request)
        return dict(self._request.query_params)

    def render_launch_form(self, launch_data: dict[str, Any], **kwargs: Any) -> Response:
        inputs = "".join(
            f'<input type="hidden" name="{name}" value="{html.escape(str(launch_data[name]))}">'
            for name in ("id_token", "state")
        )
        return HTMLResponse(
            f'<form method="post" action="{launch_data["launch_url"]}">{inputs}</form>'
        )


@dataclass
class Lti1p3Platform:
    url: str = ""
    tool_url: str = ""
    scores: list[dict[str, Any]] = field(default_factory=list)

    def conf(self) -> PlatformConf:
        key = RSAKey.generate_key(2048, private=True)
        registration = (
            Registration()
            .set_iss(self.url)
            .set_client_id(CLIENT_ID)
            .set_deployment_id(DEPLOYMENT_ID)
            .set_launch_url(f"{self.tool_url}/lti/launch")
            .set_oidc_login_url(f"{self.tool_url}/lti/login")
            .set_platform_private_key(key.as_pem(private=True).decode())
            .set_platform_public_key(key.as_pem(private=False).decode())
            .set_tool_key_set_url(f"{self.tool_url}/lti/jwks")
        )
        return PlatformConf(registration=registration)

    def app(self) -> FastAPI:
        app = FastAPI()
        platform = self
        confs: list[PlatformConf] = []

        def conf() -> PlatformConf:
            if not confs:
                confs.append(platform.conf())
            return confs[0]

        @app.get("/start")
        def start(request: Request) -> Response:
            login = Login(request, conf())
            login.set_lti_message_hint(hint="rl-9")
            return login.initiate_login("learner-42")  # type: ignore[no-any-return]

        @app.get("/auth")
        def auth(request: Request) -> Response:
            launch = Launch(request, conf())
            launch.set_user_data("learner-42", [LEARNER], "Ada Lovelace", "ada@lms.example")
            launch.set_resource_link_claim("rl-9", title="Train step")
            launch.set_launch_context_claim("ctx-3", context_title="ML 201")
            launch.set_custom_parameters_claim({"exercise": "train-step"})
            ags = LtiAgs(
                lineitems_url=f"{platform.url}/lineitems",
                lineitem_url=f"{platform.url}/lineitems/1",
                scores_service_enabled=True,
            )
            launch.set_extra_claims(ags.get_lti_ags_launch_claim())
            return launch.lti_launch()  # type: ignore[no-any-return]

        @app.get("/jwks")
        def jwks() -> dict[str, Any]:
            conf().get_registration()
            return dict(conf().get_jwks())

        @app.post("/token")
        async def token(request: Request) -> Response:
            form = dict(await request.form())
            # Checks our client assertion against our JWKS, as this library reads the spec.
            return JSONResponse(dict(conf().get_access_token(form)))

        @app.post("/lineitems/1/scores")
        async def score(request: Request) -> Response:
            bearer = request.headers.get("authorization", "").split(" ", 1)[-1]
            if not conf().validate_token(bearer, allowed_scopes=[SCORE_SCOPE]):
                return JSONResponse({"error": "scope"}, status_code=403)
            platform.scores.append(await request.json())
            return Response(status_code=204)

        return app


@pytest.fixture
def other_platform(tool_url: str, sessions: SessionFactory) -> Iterator[Lti1p3Platform]:
    platform = Lti1p3Platform(tool_url=tool_url)
    with app_in_thread(platform.app()) as url:
        platform.url = url
        with sessions.begin() as session:
            add_platform(
                session,
                issuer=url,
                client_id=CLIENT_ID,
                deployment_ids=[DEPLOYMENT_ID],
                auth_url=f"{url}/auth",
                token_url=f"{url}/token",
                jwks_url=f"{url}/jwks",
            )
        yield platform


def test_lti1p3platform_launches_and_receives_the_score(
    other_platform: Lti1p3Platform, browser_client: httpx.Client, sessions: SessionFactory
) -> None:
    form_page = browser_client.get(f"{other_platform.url}/start", follow_redirects=True)
    assert form_page.status_code == 200, form_page.text
    launched = browser_client.post(
        f"{other_platform.tool_url}/lti/launch", data=form_fields(form_page.text)
    )
    assert launched.status_code == 303, launched.text
    exercise = browser_client.get(
        other_platform.tool_url + launched.headers["location"], follow_redirects=True
    )
    assert exercise.url.path.endswith("/exercises/train-step"), exercise.text
    assert "Ada Lovelace" in exercise.text
    token = re.search(r'name="csrf_token" value="([^"]+)"', exercise.text)
    assert token
    submitted = browser_client.post(
        str(exercise.url), data={"csrf_token": token[1], "code": CORRECT_CODE}
    )
    assert submitted.status_code == 303, submitted.text

    deadline = time.monotonic() + WAIT_SECONDS
    while not other_platform.scores:
        assert time.monotonic() < deadline, "no score reached the platform"
        time.sleep(0.2)
    (score,) = other_platform.scores
    with sessions() as session:
        graded = session.scalars(select(Submission)).one()
    assert graded.status == "graded"
    assert score["userId"] == "learner-42"
    # What the tool graded, whatever the sandbox made of it on this machine's load.
    assert (score["scoreGiven"], score["scoreMaximum"]) == (graded.score, graded.max_score)
    assert graded.max_score is not None and graded.max_score > 0
    assert (score["gradingProgress"], score["activityProgress"]) == ("FullyGraded", "Completed")
