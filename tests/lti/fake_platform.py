"""A fake LMS that speaks LTI 1.3 for real: its own RSA keys and JWKS over HTTP, an OIDC auth
endpoint that signs id_tokens, a token endpoint that verifies the tool's client assertion
against the tool's own JWKS, AGS score endpoints with Moodle's rules, AGS line items (a paged
container with the spec's filters, creation, deletion) and results, and NRPS.

Tests change `claims_override` (or sign with another key) to make bad launches.
"""

from __future__ import annotations

import html
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import anyio.to_thread
import httpx
from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet, RSAKey

# Standalone (no import of tests/): scripts/check-compose.sh runs it inside the app container.
HTTP_TIMEOUT_SECONDS = 60

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
DL = "https://purl.imsglobal.org/spec/lti-dl/claim/"
AGS = "https://purl.imsglobal.org/spec/lti-ags/"
NRPS = "https://purl.imsglobal.org/spec/lti-nrps/"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
LINEITEM_TYPE = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEM_CONTAINER_TYPE = "application/vnd.ims.lis.v2.lineitemcontainer+json"
RESULT_CONTAINER_TYPE = "application/vnd.ims.lis.v2.resultcontainer+json"
# The most entries a page of line items or results holds, whatever `limit` asks.
PAGE_SIZE = 2


# The LMS page's side of LTI Platform Storage, with the specs' message shapes: lti.capabilities,
# lti.put_data and lti.get_data, each answered "<subject>.response" with the request's
# message_id, to the asking frame's origin; values are kept per origin. `ltiStorageLog` lists
# the subjects received, for the tests. And Canvas's lti.frameResize: the tool's frame takes
# the height asked (CSS pixels), each request kept in `frameResizes` with its sender's origin.
PLATFORM_STORAGE_RESPONDER = """
window.ltiStorageLog = [];
window.frameResizes = [];
const ltiStorage = {};
window.addEventListener("message", (event) => {
  const message = event.data;
  if (!message || typeof message.subject !== "string") return;
  if (message.subject === "lti.frameResize") {
    window.frameResizes.push({ height: message.height, origin: event.origin });
    document.getElementById("tool").style.height = message.height + "px";
    return;
  }
  window.ltiStorageLog.push(message.subject);
  const space = (ltiStorage[event.origin] = ltiStorage[event.origin] || {});
  const reply = (body) =>
    event.source.postMessage(
      { subject: message.subject + ".response", message_id: message.message_id, ...body },
      event.origin
    );
  if (message.subject === "lti.capabilities") {
    reply({ supported_messages: [{ subject: "lti.put_data" }, { subject: "lti.get_data" }] });
  } else if (message.subject === "lti.put_data") {
    space[message.key] = message.value;
    reply({ key: message.key, value: message.value });
  } else if (message.subject === "lti.get_data") {
    if (message.key in space) {
      reply({ key: message.key, value: space[message.key] });
    } else {
      reply({ key: message.key, error: { code: "bad_request", message: "no value for this key" } });
    }
  } else {
    reply({ error: { code: "unsupported_subject", message: "not supported here" } });
  }
});
"""


def new_key() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": secrets.token_hex(6)}, private=True)


@dataclass
class RecordedScore:
    user_id: str
    score_given: float
    score_maximum: float
    timestamp: datetime
    grading_progress: str
    activity_progress: str


@dataclass
class FakePlatform:
    """One platform: set `url` (from the server) and `tool_url` before use."""

    client_id: str = "fake-client"
    deployment_id: str = "deployment-1"
    url: str = ""
    tool_url: str = ""
    keys: list[RSAKey] = field(default_factory=lambda: [new_key()])
    # Merged into every id_token after the defaults (None deletes a claim).
    claims_override: dict[str, Any] = field(default_factory=dict)
    message_type: str = "LtiResourceLinkRequest"
    roles: list[str] = field(default_factory=lambda: [LEARNER])
    subject: str = "learner-1"
    custom: dict[str, str] = field(default_factory=lambda: {"exercise": "train-step"})
    # LTI Platform Storage: the login names this target, and /course answers postMessages.
    storage_target: str | None = None
    # scores[lineitem] = the stored score per user (Moodle keeps one, the newest).
    scores: dict[str, dict[str, RecordedScore]] = field(default_factory=dict)
    score_posts: int = 0
    fail_score_posts: int = 0  # answer 503 to this many score posts first
    # Hold the next score post unanswered until `release_stalled` is set (a tool dying mid-POST).
    stall_next_score_post: bool = False
    release_stalled: threading.Event = field(default_factory=threading.Event)
    ungradable_users: set[str] = field(default_factory=set)
    # The scope of every access token issued, in order.
    token_scopes: list[str] = field(default_factory=list)
    members: list[dict[str, Any]] = field(default_factory=list)
    used_assertion_ids: set[str] = field(default_factory=set)
    deep_link_responses: list[dict[str, Any]] = field(default_factory=list)
    # The line items of course 7, by their number in the URL; "1" is the launch's.
    line_items: dict[str, dict[str, Any]] = field(default_factory=dict)
    line_item_posts: int = 0  # received, counted before any stall
    line_item_deletes: int = 0
    # Hold the next line item POST, before making anything, until `release_stalled` is set;
    # then make it and answer as ever (a slow platform, or a request still on the way).
    stall_next_line_item_post: bool = False
    _line_items_made: int = 0
    _access_tokens: dict[str, set[str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def issuer(self) -> str:
        return self.url

    @property
    def signing_key(self) -> RSAKey:
        return self.keys[-1]

    def rotate(self) -> None:
        """Sign with a new key from now on (the JWKS publishes both)."""
        self.keys.append(new_key())

    def cli_args(self) -> list[str]:
        return [
            "--issuer", self.issuer,
            "--client-id", self.client_id,
            "--deployment-id", self.deployment_id,
            "--auth-url", f"{self.url}/auth",
            "--token-url", f"{self.url}/token",
            "--jwks-url", f"{self.url}/jwks",
        ]  # fmt: skip

    def registration(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "client_id": self.client_id,
            "deployment_ids": [self.deployment_id],
            "auth_url": f"{self.url}/auth",
            "token_url": f"{self.url}/token",
            "jwks_url": f"{self.url}/jwks",
        }

    def login_params(self) -> dict[str, str]:
        params = {
            "iss": self.issuer,
            "login_hint": self.subject,
            "target_link_uri": f"{self.tool_url}/lti/launch",
            "lti_message_hint": "hint-1",
            "client_id": self.client_id,
            "lti_deployment_id": self.deployment_id,
        }
        if self.storage_target is not None:
            params["lti_storage_target"] = self.storage_target
        return params

    def id_token_claims(self, nonce: str) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.client_id,
            "sub": self.subject,
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
            "name": f"Person {self.subject}",
            "email": f"{self.subject}@lms.example",
            LTI + "message_type": self.message_type,
            LTI + "version": "1.3.0",
            LTI + "deployment_id": self.deployment_id,
            LTI + "target_link_uri": f"{self.tool_url}/lti/launch",
            LTI + "roles": self.roles,
            LTI + "context": {"id": "course-7", "label": "DL101", "title": "Deep Learning 101"},
            LTI + "custom": self.custom,
            LTI + "tool_platform": {"guid": "fake", "url": self.url},
            NRPS + "claim/namesroleservice": {
                "context_memberships_url": f"{self.url}/memberships",
                "service_versions": ["2.0"],
            },
        }
        if self.message_type == "LtiResourceLinkRequest":
            claims[LTI + "resource_link"] = {"id": "link-1", "title": "Train step"}
            claims[AGS + "claim/endpoint"] = {
                "scope": [
                    AGS + "scope/score",
                    AGS + "scope/lineitem",
                    AGS + "scope/result.readonly",
                ],
                "lineitems": f"{self.url}/lineitems?course=7",
                "lineitem": f"{self.url}/lineitems/1/lineitem?course=7",
            }
        else:
            claims[DL + "deep_linking_settings"] = {
                "deep_link_return_url": f"{self.url}/deep-link-return",
                "accept_types": ["ltiResourceLink"],
                "accept_presentation_document_targets": ["iframe", "window"],
                "data": "opaque-data-7",
            }
        for name, value in self.claims_override.items():
            if value is None:
                claims.pop(name, None)
            else:
                claims[name] = value
        return claims

    def lineitem_url(self, item: str) -> str:
        return f"{self.url}/lineitems/{item}/lineitem?course=7"

    def sign(self, claims: dict[str, Any], key: RSAKey | None = None) -> str:
        key = key or self.signing_key
        return jwt.encode({"alg": "RS256", "kid": key.kid, "typ": "JWT"}, claims, key)

    def verify_tool_jwt(self, token: str) -> dict[str, Any]:
        """A JWT the tool signed, checked against the tool's published JWKS."""
        tool_keys = KeySet.import_key_set(
            httpx.get(f"{self.tool_url}/lti/jwks", timeout=HTTP_TIMEOUT_SECONDS).json()
        )
        return dict(jwt.decode(token, tool_keys, algorithms=["RS256"]).claims)

    def app(self) -> FastAPI:
        app = FastAPI()
        platform = self

        @app.get("/course")
        def course_page() -> HTMLResponse:
            """The LMS's page with the tool in an iframe, as learners see it."""
            login = f"{platform.tool_url}/lti/login?{urlencode(platform.login_params())}"
            return HTMLResponse(
                "<!doctype html><title>LMS course</title><h1>LMS course</h1>"
                f"<script>{PLATFORM_STORAGE_RESPONDER}</script>"
                f'<iframe id="tool" src="{html.escape(login)}" width="1000" height="700"></iframe>'
            )

        @app.get("/jwks")
        def jwks() -> dict[str, Any]:
            return {
                "keys": [k.as_dict(private=False, use="sig", alg="RS256") for k in platform.keys]
            }

        @app.get("/auth")
        def auth(request: Request) -> Response:
            query = request.query_params
            expected = {
                "scope": "openid",
                "response_type": "id_token",
                "response_mode": "form_post",
                "prompt": "none",
                "client_id": platform.client_id,
                "redirect_uri": f"{platform.tool_url}/lti/launch",
                "login_hint": platform.subject,
            }
            wrong = {k: query.get(k) for k, v in expected.items() if query.get(k) != v}
            if wrong or not query.get("state") or not query.get("nonce"):
                return JSONResponse({"error": "invalid_request", "wrong": wrong}, status_code=400)
            id_token = platform.sign(platform.id_token_claims(query["nonce"]))
            fields = {"id_token": id_token, "state": query["state"]}
            inputs = "".join(
                f'<input type="hidden" name="{k}" value="{html.escape(v)}">'
                for k, v in fields.items()
            )
            # A real platform's page: it posts the form to the tool at once.
            return HTMLResponse(
                f'<form id="launch" method="post" action="{query["redirect_uri"]}">{inputs}'
                "</form><script>document.getElementById('launch').submit()</script>"
            )

        @app.post("/token")
        def token(
            grant_type: str = Form(),
            client_assertion_type: str = Form(),
            client_assertion: str = Form(),
            scope: str = Form(),
        ) -> dict[str, Any]:
            if grant_type != "client_credentials" or client_assertion_type != (
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
            ):
                raise HTTPException(400, "unsupported_grant_type")
            try:
                claims = platform.verify_tool_jwt(client_assertion)
            except JoseError as exc:
                raise HTTPException(401, f"invalid_client: {exc}") from None
            now = time.time()
            if (
                claims.get("iss") != platform.client_id
                or claims.get("sub") != platform.client_id
                or claims.get("aud") not in (f"{platform.url}/token", [f"{platform.url}/token"])
                or not now - 60 <= claims.get("iat", 0) <= now + 60
                or claims.get("exp", 0) < now
                or claims.get("jti") in platform.used_assertion_ids
            ):
                raise HTTPException(401, f"invalid_client: claims {claims}")
            platform.used_assertion_ids.add(claims["jti"])
            access_token = secrets.token_urlsafe(16)
            with platform._lock:
                platform.token_scopes.append(scope)
                platform._access_tokens[access_token] = set(scope.split())
            return {
                "access_token": access_token,
                "token_type": "Bearer",
                "expires_in": 3600,
                "scope": scope,
            }

        def require_scope(request: Request, scope: str) -> None:
            bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
            if scope not in platform._access_tokens.get(bearer, set()):
                raise HTTPException(401, "invalid or missing access token for " + scope)

        @app.post("/lineitems/{item}/lineitem/scores")
        async def score(item: str, request: Request) -> Response:
            with platform._lock:
                platform.score_posts += 1
                stall, platform.stall_next_score_post = platform.stall_next_score_post, False
            if stall:
                await anyio.to_thread.run_sync(platform.release_stalled.wait)
                return JSONResponse({"error": "too late"}, status_code=503)
            with platform._lock:
                if platform.fail_score_posts > 0:
                    platform.fail_score_posts -= 1
                    return JSONResponse({"error": "try later"}, status_code=503)
            require_scope(request, AGS + "scope/score")
            if request.headers.get("content-type") != SCORE_TYPE:
                return JSONResponse({"error": "wrong content type"}, status_code=415)
            if request.query_params.get("course") != "7":
                return JSONResponse({"error": "query string lost"}, status_code=404)
            body = await request.json()
            user_id = body.get("userId")
            if user_id in platform.ungradable_users:
                # Moodle: a user who cannot be graded in this course.
                return JSONResponse({"error": "user not gradable"}, status_code=400)
            timestamp = datetime.fromisoformat(body["timestamp"])
            if timestamp.tzinfo is None:
                return JSONResponse({"error": "timestamp without zone"}, status_code=400)
            stored = platform.scores.setdefault(item, {}).get(user_id)
            if stored is not None and timestamp <= stored.timestamp:
                # Moodle: not newer than the score it has.
                return JSONResponse({"error": "timestamp not newer"}, status_code=409)
            if body.get("gradingProgress") == "FullyGraded":
                platform.scores[item][user_id] = RecordedScore(
                    user_id,
                    float(body["scoreGiven"]),
                    float(body["scoreMaximum"]),
                    timestamp,
                    body["gradingProgress"],
                    body.get("activityProgress", ""),
                )
            return Response(status_code=200)

        def page_of(request: Request, entries: list[dict[str, Any]], media_type: str) -> Response:
            """One page of `entries` (`limit`, at most PAGE_SIZE) with Link: rel="next"."""
            if media_type not in request.headers.get("accept", ""):
                return JSONResponse({"error": f"Accept {media_type}"}, status_code=406)
            query = request.query_params
            limit = min(int(query.get("limit", PAGE_SIZE)), PAGE_SIZE)
            start = int(query.get("page_start", 0))
            headers = {}
            if start + limit < len(entries):
                following = request.url.include_query_params(page_start=start + limit)
                headers["Link"] = f'<{following}>; rel="next"'
            return JSONResponse(
                entries[start : start + limit], media_type=media_type, headers=headers
            )

        @app.get("/lineitems")
        def line_item_container(request: Request) -> Response:
            require_scope(request, AGS + "scope/lineitem")
            if request.query_params.get("course") != "7":
                return JSONResponse({"error": "query string lost"}, status_code=404)
            filters = {
                "resource_link_id": "resourceLinkId",
                "resource_id": "resourceId",
                "tag": "tag",
            }
            found = [
                item
                for item in platform.line_items.values()
                if all(
                    item.get(field) == request.query_params[name]
                    for name, field in filters.items()
                    if name in request.query_params
                )
            ]
            return page_of(request, found, LINEITEM_CONTAINER_TYPE)

        @app.post("/lineitems")
        async def create_line_item(request: Request) -> Response:
            with platform._lock:
                platform.line_item_posts += 1
                stall, platform.stall_next_line_item_post = (
                    platform.stall_next_line_item_post,
                    False,
                )
            if stall:
                await anyio.to_thread.run_sync(platform.release_stalled.wait)
            require_scope(request, AGS + "scope/lineitem")
            if request.headers.get("content-type") != LINEITEM_TYPE:
                return JSONResponse({"error": "wrong content type"}, status_code=415)
            body = await request.json()
            maximum = body.get("scoreMaximum")
            if not isinstance(maximum, int | float) or maximum <= 0 or not body.get("label"):
                return JSONResponse({"error": "scoreMaximum > 0 and label"}, status_code=400)
            with platform._lock:
                platform._line_items_made += 1
                number = str(platform._line_items_made)
                item = {**body, "id": platform.lineitem_url(number)}
                platform.line_items[number] = item
            return JSONResponse(item, status_code=201, media_type=LINEITEM_TYPE)

        @app.delete("/lineitems/{item}/lineitem")
        def delete_line_item(item: str, request: Request) -> Response:
            require_scope(request, AGS + "scope/lineitem")
            with platform._lock:
                platform.line_item_deletes += 1
                if platform.line_items.pop(item, None) is None:
                    return JSONResponse({"error": "no such line item"}, status_code=404)
                platform.scores.pop(item, None)
            return Response(status_code=204)

        @app.get("/lineitems/{item}/lineitem/results")
        def results(item: str, request: Request) -> Response:
            require_scope(request, AGS + "scope/result.readonly")
            user_id = request.query_params.get("user_id")
            found = [
                {
                    "id": f"{platform.url}/lineitems/{item}/lineitem/results/{score.user_id}",
                    "scoreOf": platform.lineitem_url(item),
                    "userId": score.user_id,
                    "resultScore": score.score_given,
                    "resultMaximum": score.score_maximum,
                }
                for score in platform.scores.get(item, {}).values()
                if user_id is None or score.user_id == user_id
            ]
            return page_of(request, found, RESULT_CONTAINER_TYPE)

        @app.get("/memberships")
        def memberships(request: Request) -> Response:
            require_scope(request, NRPS + "scope/contextmembership.readonly")
            return JSONResponse(
                {
                    "id": f"{platform.url}/memberships",
                    "context": {"id": "course-7", "title": "Deep Learning 101"},
                    "members": platform.members,
                },
                media_type="application/vnd.ims.lti-nrps.v2.membershipcontainer+json",
            )

        @app.post("/deep-link-return")
        def deep_link_return(JWT: str = Form()) -> Response:
            claims = platform.verify_tool_jwt(JWT)
            platform.deep_link_responses.append(claims)
            return HTMLResponse("<p>Content added.</p>")

        return app


def follow_login(
    client: httpx.Client, platform: FakePlatform, method: str = "GET"
) -> httpx.Response:
    """Log in through the tool and the fake platform; return the platform's form page."""
    params = platform.login_params()
    if method == "GET":
        started = client.get(f"{platform.tool_url}/lti/login?{urlencode(params)}")
    else:
        started = client.post(f"{platform.tool_url}/lti/login", data=params)
    assert started.status_code == 302, started.text
    return client.get(started.headers["location"])
