"""The FastAPI application: `create_app(settings)`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import OperationalError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api import routes as api_routes
from app.db import create_db_engine, create_session_factory, database_revision, head_revision
from app.grading.queue import create_dispatcher
from app.settings import Settings
from app.web import account_pages, instructor_pages, learner_pages
from app.web.rendering import install_error_pages
from app.web.sessions import load_secret_key

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "web" / "static"
DATABASE_RETRY_AFTER_SECONDS = 5


class DatabaseNotMigrated(RuntimeError):
    """The database schema is not at the newest migration."""


def create_app(settings: Settings) -> FastAPI:
    """The whole application. Its lifespan opens the database and starts the grading workers."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_db_engine(
            settings.database_url, busy_timeout_seconds=settings.database_busy_timeout_seconds
        )
        current, head = database_revision(engine), head_revision()
        if current != head:
            engine.dispose()
            raise DatabaseNotMigrated(
                f"the database is at migration {current or 'none'}, not {head}: "
                "run 'loopgrade migrate' (serve does it too)"
            )
        sessions = create_session_factory(engine)
        dispatcher = create_dispatcher(sessions, settings)
        app.state.sessions = sessions
        app.state.dispatcher = dispatcher
        dispatcher.start()
        try:
            yield
        finally:
            # Waits for the grades in progress; queued ones stay in the database (and broker).
            await anyio.to_thread.run_sync(dispatcher.stop)
            engine.dispose()

    app = FastAPI(
        title="loopgrade",
        summary="Auto-graded exercises for PyTorch training loops.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.secret_key = load_secret_key(settings)
    app.add_middleware(
        RequestBodyLimit,
        max_body_bytes=settings.request_body_bytes,
        detail=f"request body over {settings.request_body_bytes} bytes; "
        f"code may be at most {settings.max_code_bytes} bytes",
    )

    @app.exception_handler(RequestValidationError)
    async def on_invalid_request(request: Request, exc: RequestValidationError) -> Response:
        return JSONResponse({"detail": validation_messages(exc)}, status_code=422)

    @app.exception_handler(OperationalError)
    async def on_database_unreachable(request: Request, exc: OperationalError) -> Response:
        # The database is down or restarting: the pool reconnects by itself once it is back.
        log.error("%s %s: database unavailable: %s", request.method, request.url.path, exc.orig)
        return JSONResponse(
            {"detail": "the database is unavailable; retry in a few seconds"},
            status_code=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
        )

    @app.exception_handler(Exception)
    async def on_server_fault(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            {"detail": "internal server error; the server log has the details"},
            status_code=500,
        )

    install_error_pages(app)
    app.include_router(api_routes.router)
    app.include_router(account_pages.router)
    app.include_router(learner_pages.router)
    app.include_router(instructor_pages.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


class RequestBodyLimit:
    """Refuse request bodies over `max_body_bytes` with a JSON 413, before they fill memory.

    (Starlette's own limit answers in plain text, and every error here is JSON.)
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
            response = JSONResponse({"detail": self.detail}, status_code=413)
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
