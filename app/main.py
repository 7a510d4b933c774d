"""The FastAPI application: `create_app(settings)`.

One idea over 400 lines: the assembly of the application, where every router, middleware and
start-up check meets.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app import health
from app.access import load_secret_key
from app.admission import AdmissionControl, RequestCapacity, SubmissionMatcher
from app.api import learner_routes as learner_api_routes
from app.api import routes as api_routes
from app.db import (
    RequestTransaction,
    SessionFactory,
    create_db_engine,
    create_session_factory,
    database_revision,
    head_revision,
    known_revision,
    newer_database_sentence,
)
from app.errors import AppError
from app.grading.dispatch import create_dispatcher
from app.grading.queue import Dispatcher, enqueue_after_commit, open_grading_runner
from app.grading.queue_gauge import WaitingGauge, install_waiting_gauge
from app.grading.state_channel import StateSubscriber, state_channel, state_channel_url
from app.hosts import AllowedHosts, PublicUrlRequired, public_url_problem
from app.integrations.keys import ToolKeysUnreadable, prepare_tool_keys, start_up_sealing
from app.lti.routes import install_lti
from app.models import SubmissionStatus
from app.operations import redact_access_logs
from app.outbox import OutboxDelivery
from app.progress import ProgressStreams
from app.reactions import install_reactions, installed_reactions
from app.rendering import error_page, install_sign_in_redirect
from app.settings import Settings
from app.web import (
    account_pages,
    account_settings_pages,
    course_staff_pages,
    diagnosis_report_pages,
    draft_api,
    events,
    exercise_list_pages,
    extension_pages,
    gradebook_pages,
    integration_pages,
    learner_pages,
    misconception_pages,
    password_reset_pages,
    regrade_pages,
    settings_pages,
    submission_review_pages,
    token_pages,
)
from graders.exercises import refused_exercises
from graders.grading import install_diagnoses
from sandbox import Runner

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "web" / "static"
DATABASE_RETRY_AFTER_SECONDS = 5
# The grading engine's connections beside one per grading thread: the lease sweeper and
# renewer, the outbox, the start-up sweep.
BACKGROUND_CONNECTIONS = 4


class DatabaseNotMigrated(RuntimeError):
    """The database schema is not at the newest migration."""


@dataclass
class Databases:
    """Two engines, so that requests and grading never wait for each other's connections: the
    requests' pool holds one connection per admitted request (app/admission.py), the grading's
    one per grading thread and one per background thread."""

    engine: Engine
    grading_engine: Engine

    @classmethod
    def open(cls, settings: Settings, capacity: RequestCapacity) -> Databases:
        """Open both; raise (and close them) unless the schema is the newest and the tool's
        LTI keys can be read."""
        databases = cls(
            create_db_engine(
                settings.database_url,
                busy_timeout_seconds=settings.database_busy_timeout_seconds,
                pool_size=capacity.connections,
                max_overflow=0,
            ),
            create_db_engine(
                settings.database_url,
                busy_timeout_seconds=settings.database_busy_timeout_seconds,
                pool_size=settings.worker_count + BACKGROUND_CONNECTIONS,
                max_overflow=settings.worker_count,
            ),
        )
        try:
            current, head = database_revision(databases.engine), head_revision()
            if not known_revision(current):
                raise DatabaseNotMigrated(newer_database_sentence(str(current)))
            if current != head:
                raise DatabaseNotMigrated(
                    f"the database is at migration {current or 'none'}, not {head}: "
                    "run 'loopgrade migrate' (serve does it too)"
                )
            # Here, not at the first launch: a wrong key-encryption key stops the start.
            with create_session_factory(databases.engine).begin() as session:
                prepare_tool_keys(session, start_up_sealing(session, settings))
        except (DatabaseNotMigrated, ToolKeysUnreadable):
            databases.close()
            raise
        return databases

    def close(self) -> None:
        self.engine.dispose()
        self.grading_engine.dispose()


@dataclass
class Grading:
    """What grades and delivers in this process: the sandbox runner (none with a broker: the
    workers grade), the dispatcher, the outbox, and the Celery workers' state changes from
    Redis to this process's progress streams."""

    runner: Runner | None
    dispatcher: Dispatcher
    outbox: OutboxDelivery
    subscriber: StateSubscriber | None

    @classmethod
    async def start(
        cls,
        settings: Settings,
        sessions: SessionFactory,
        grading_sessions: SessionFactory,
        progress_streams: ProgressStreams,
        gauge: WaitingGauge,
    ) -> Grading:
        # Chosen and probed once; its warm pool (if any) is started here and lives with the app.
        runner = (
            None
            if settings.broker_url
            else await anyio.to_thread.run_sync(open_grading_runner, settings)
        )
        if runner is not None:
            log.info("sandbox: %s", runner.status)

        def state_changed(submission_id: str, status: SubmissionStatus) -> None:
            gauge.state_changed(submission_id, status)
            progress_streams.state_changed(submission_id, status)

        def state_channel_reconnected() -> None:
            gauge.forget()  # the messages sent while it was away are lost
            progress_streams.wake_all()

        dispatcher = create_dispatcher(
            grading_sessions, settings, runner=runner, on_state_change=state_changed
        )
        outbox = OutboxDelivery(grading_sessions, settings)
        outbox.wake_after_commits_of(sessions)
        enqueue_after_commit(sessions, dispatcher)
        enqueue_after_commit(grading_sessions, dispatcher)
        channel_url = state_channel_url(settings)
        subscriber = (
            StateSubscriber(
                channel_url,
                state_channel(settings),
                on_state_change=state_changed,
                on_reconnect=state_channel_reconnected,
            )
            if channel_url is not None
            else None
        )
        dispatcher.start()
        outbox.start()
        if subscriber is not None:
            subscriber.start()
        return cls(runner, dispatcher, outbox, subscriber)

    async def stop(self) -> None:
        if self.subscriber is not None:
            await anyio.to_thread.run_sync(self.subscriber.stop)
        # Waits for the grades in progress; queued ones stay in the database (and broker).
        await anyio.to_thread.run_sync(self.dispatcher.stop)
        await anyio.to_thread.run_sync(self.outbox.stop)
        if self.runner is not None:
            self.runner.close()


def create_app(settings: Settings) -> FastAPI:
    """The whole application. Its lifespan opens the database and starts the grading workers."""
    if problem := public_url_problem(settings):
        raise PublicUrlRequired(problem)
    install_reactions()  # this process stores grades (embedded workers) and delivers them
    install_diagnoses()  # and shows them, by their diagnoses' names and words
    redact_access_logs()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        capacity = RequestCapacity.from_settings(settings)
        anyio.to_thread.current_default_thread_limiter().total_tokens = capacity.threads
        databases = Databases.open(settings, capacity)
        sessions = create_session_factory(databases.engine)
        grading_sessions = create_session_factory(databases.grading_engine)
        install_waiting_gauge(sessions, gauge)
        grading = await Grading.start(settings, sessions, grading_sessions, progress_streams, gauge)
        app.state.sessions = sessions
        app.state.dispatcher = grading.dispatcher
        app.state.outbox = grading.outbox
        app.state.runner = grading.runner
        log.info("a stored grade triggers: %s", installed_reactions())
        for folder, reason in refused_exercises().items():
            log.error("exercise folder %s is not served: %s", folder, reason)
        try:
            yield
        finally:
            await grading.stop()
            databases.close()

    app = FastAPI(
        title="loopgrade",
        summary="Auto-graded exercises for PyTorch training loops.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    progress_streams = ProgressStreams(settings)
    app.state.progress_streams = progress_streams
    app.state.secret_key = load_secret_key(settings)
    # It hears every grading's end: this process's threads, or every worker's over Redis.
    gauge = WaitingGauge(
        hears_exits=not settings.broker_url or state_channel_url(settings) is not None
    )
    app.state.waiting_gauge = gauge
    # Inside the error handlers' middleware: an error answer is seen here, and rolls back.
    app.add_middleware(RequestTransaction)
    # Outside the transaction (a request waiting for a slot has no session yet), inside the
    # body limit (whose 413 it answers while it reads the body).
    app.add_middleware(
        AdmissionControl,
        settings=settings,
        error_response=error_response,
        gauge=gauge,
        is_submission=submission_matcher(),
    )
    app.add_middleware(
        RequestBodyLimit,
        max_body_bytes=settings.request_body_bytes,
        detail=f"request body over {settings.request_body_bytes} bytes; "
        f"code may be at most {settings.max_code_bytes} bytes",
    )
    # Before any route: links built on the request's address are built on this server's own.
    app.add_middleware(AllowedHosts, settings=settings, error_response=error_response)
    if settings.trusted_proxy_networks:
        # Outermost: every route and limit sees the client the trusted proxy names. Only
        # here: the CLI and the tests serve with uvicorn's own proxy_headers off, so that
        # X-Forwarded-For is believed from no one unless an operator names the proxy.
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxy_networks)

    install_error_handlers(app)
    install_sign_in_redirect(app)
    app.include_router(health.router)
    install_lti(app, settings)
    app.include_router(integration_pages.router)
    app.include_router(api_routes.router)
    app.include_router(learner_api_routes.router)
    app.include_router(account_pages.router)
    app.include_router(account_settings_pages.router)
    app.include_router(password_reset_pages.router)
    app.include_router(token_pages.router)
    app.include_router(learner_pages.router)
    app.include_router(events.router)
    app.include_router(draft_api.router)
    app.include_router(gradebook_pages.router)
    app.include_router(submission_review_pages.router)
    app.include_router(regrade_pages.router)
    app.include_router(settings_pages.router)
    app.include_router(course_staff_pages.router)
    app.include_router(extension_pages.router)
    app.include_router(exercise_list_pages.router)
    app.include_router(misconception_pages.router)
    app.include_router(diagnosis_report_pages.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


# The routes that take a submission in (app.grading.intake.accept_submission).
SUBMISSION_ENDPOINTS = frozenset(
    {
        api_routes.submit,
        api_routes.submit_file,
        learner_api_routes.submit_mine,
        learner_api_routes.submit_my_file,
        learner_pages.submit_practice,
        learner_pages.submit_in_course,
    }
)


# The routers that hold them (the routes' paths carry their prefixes).
SUBMISSION_ROUTERS = (api_routes.router, learner_api_routes.router, learner_pages.router)


def submission_matcher() -> SubmissionMatcher:
    """Whether a request is a POST to a route of SUBMISSION_ENDPOINTS (for admission control,
    which runs before the routing)."""
    paths = [
        route.path_regex
        for router in SUBMISSION_ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute) and route.endpoint in SUBMISSION_ENDPOINTS
    ]
    # A route moved to another router would be missed without a word: say so at once.
    assert len(paths) == len(SUBMISSION_ENDPOINTS), "a submission route is not in its router"

    def is_submission(scope: Scope) -> bool:
        return scope["method"] == "POST" and any(path.match(scope["path"]) for path in paths)

    return is_submission


# Answered in JSON, errors too: the REST API, and the drafts the exercise page's script saves.
JSON_PATH_PREFIXES = ("/api/", "/drafts/")


def _is_api(request: Request) -> bool:
    return request.url.path.startswith(JSON_PATH_PREFIXES)


def error_response(
    request: Request,
    status_code: int,
    title: str,
    message: str,
    headers: dict[str, str] | None = None,
    json_fields: dict[str, object] | None = None,
) -> Response:
    """The one way an error is answered: JSON under /api/, a styled page everywhere else
    (a learner inside an LMS iframe must not meet raw JSON)."""
    if _is_api(request):
        return JSONResponse(
            {"detail": message, **(json_fields or {})}, status_code=status_code, headers=headers
        )
    return error_page(request, status_code, title, message, headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def on_app_error(request: Request, exc: AppError) -> Response:
        return error_response(
            request, exc.status_code, exc.title, exc.message, exc.headers, exc.json_fields()
        )

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        phrase = HTTPStatus(exc.status_code).phrase
        message = str(exc.detail)
        if exc.status_code == 404 and message == phrase and not _is_api(request):
            message = (
                "There is no page at this address. Check the link, or start from the home page."
            )
        return error_response(request, exc.status_code, phrase, message, dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def on_invalid_request(request: Request, exc: RequestValidationError) -> Response:
        if _is_api(request):
            return JSONResponse({"detail": validation_messages(exc)}, status_code=422)
        fields = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in exc.errors()
        )
        return error_page(
            request,
            422,
            "Not accepted",
            f"The form was not filled in as this page expects ({fields}). "
            "Go back, reload the page and send it again.",
        )

    @app.exception_handler(OperationalError)
    async def on_database_unreachable(request: Request, exc: OperationalError) -> Response:
        # The database is down or restarting: the pool reconnects by itself once it is back.
        log.error("%s %s: database unavailable: %s", request.method, request.url.path, exc.orig)
        return error_response(
            request,
            503,
            "Try again shortly",
            "the database is unavailable; retry in a few seconds",
            {"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
        )

    @app.exception_handler(PoolTimeout)
    async def on_database_busy(request: Request, exc: PoolTimeout) -> Response:
        # Every connection was taken for the pool's whole timeout: too many requests at once.
        log.error("%s %s: no database connection free: %s", request.method, request.url.path, exc)
        return error_response(
            request,
            503,
            "Try again shortly",
            "the server is busy; retry in a few seconds",
            {"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
        )

    @app.exception_handler(Exception)
    async def on_server_fault(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error_response(
            request,
            500,
            "Server error",
            "internal server error; the server log has the details",
        )


class RequestBodyLimit:
    """Refuse request bodies over `max_body_bytes` with a 413, before they fill memory.

    (Starlette's own limit answers in plain text, not as our errors are answered.)
    """

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, detail: str) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.detail = detail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            response = error_response(Request(scope), 413, "Too large", self.detail)
            await response(scope, receive, send)
            return

        received_bytes = 0

        async def receive_within_limit() -> Message:
            nonlocal received_bytes
            message = await receive()
            if message["type"] == "http.request":
                received_bytes += len(message.get("body", b""))
                if received_bytes > self.max_body_bytes:
                    # Reading the body happens inside the route, whose handlers answer in JSON.
                    raise HTTPException(413, detail=self.detail)
            return message

        await self.app(scope, receive_within_limit, send)


def validation_messages(exc: RequestValidationError) -> list[dict[str, object]]:
    """Pydantic's errors without the echoed input (which may be 64 KiB of code)."""
    messages: list[dict[str, object]] = []
    for error in exc.errors():
        message = str(error["msg"])
        if error["type"] == "json_invalid":
            reason = error.get("ctx", {}).get("error", "")
            message = f"the body is not valid JSON: {reason} at character {error['loc'][-1]}"
        elif error["type"] == "model_attributes_type" and tuple(error["loc"]) == ("body",):
            message = "the body must be a JSON object, sent with 'Content-Type: application/json'"
        messages.append({"loc": list(error["loc"]), "msg": message, "type": error["type"]})
    return messages
