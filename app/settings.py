"""Server configuration: one `Settings` object, read from `LOOPGRADE_*` environment variables."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from fastapi import Depends, Request
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Everything an operator can set. Built once per process, by the CLI."""

    model_config = SettingsConfigDict(env_prefix="LOOPGRADE_", extra="ignore")

    data_dir: Path = Field(
        default=Path("data"), description="Where the SQLite database and other state live."
    )
    database_url: str = Field(
        default="", description="SQLAlchemy URL; empty means SQLite at <data_dir>/loopgrade.db."
    )
    # Each grade runs two sandboxes at once (visible and hidden cases), each busy on one core:
    # more workers than half the cores only queue on the CPU (measured in bench/).
    worker_count: int = Field(
        default_factory=lambda: max(1, (os.cpu_count() or 2) // 2),
        ge=1,
        le=64,
        description="Grading threads; default: half the CPU cores.",
    )
    max_code_bytes: int = Field(
        default=64 * 1024, ge=1, description="Largest accepted submission, UTF-8 bytes."
    )
    max_upload_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="Largest accepted uploaded file (a notebook carries outputs besides code).",
    )
    # The sandbox package reads LOOPGRADE_SANDBOX itself; declared here so that a wrong value
    # stops `loopgrade serve` at once, with the other settings' errors.
    sandbox: Literal["auto", "bwrap", "docker"] = Field(
        default="auto", description="Sandbox backend for learner code."
    )
    # Empty means the grader's own limits (graders.grading.GRADING_LIMITS).
    grading_wall_timeout_seconds: float | None = Field(
        default=None, gt=0, description="Wall-clock cap on each sandbox run of a grade."
    )
    grading_cpu_seconds: float | None = Field(
        default=None, gt=0, description="CPU-time cap on each sandbox run of a grade."
    )
    database_busy_timeout_seconds: float = Field(default=10.0, gt=0)

    # Many hosts (docs/deploy.md).
    broker_url: str = Field(
        default="",
        description="Celery broker (redis://host:6379/0 or amqp://...); empty means grading "
        "threads inside the server process.",
    )
    worker_queue: str = Field(
        default="grading", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Celery queue name."
    )
    worker_task_time_limit_seconds: float = Field(
        default=600.0,
        gt=0,
        description="Celery hard time limit on one grading task (the prefork pool enforces it; "
        "the sandbox caps each run in any case).",
    )
    worker_pool: Literal["threads", "prefork"] = Field(
        default="threads",
        description="Celery pool of `loopgrade worker`: grading waits on sandbox processes, "
        "so threads share one warm sandbox pool; prefork enforces the task time limit.",
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long a worker's claim on a submission lasts unless renewed (every "
        "third of it); a dead worker's submission is graded again once its lease expires.",
    )
    sweep_interval_seconds: float = Field(
        default=10.0, gt=0, description="How often expired leases and lost messages are swept."
    )
    redeliver_after_seconds: float = Field(
        default=300.0,
        gt=0,
        description="A submission queued this long is sent to the workers again, in case the "
        "broker lost its message (sending twice is harmless: only one claim grades).",
    )
    grading_max_attempts: int = Field(
        default=5,
        ge=1,
        description="Claims of one submission before a sandbox fault is stored as an error.",
    )
    retry_backoff_seconds: float = Field(
        default=2.0, gt=0, description="First delay after a sandbox fault; doubles each time."
    )
    retry_backoff_max_seconds: float = Field(default=120.0, gt=0)

    # People and pages.
    secret_key: str = Field(
        default="",
        description="Signs session and CSRF cookies; empty means a random key kept in "
        "<data_dir>/secret_key. Set it alike on every host behind one address.",
    )
    session_max_age_seconds: int = Field(
        default=14 * 24 * 3600, ge=60, description="How long a sign-in lasts."
    )
    cookie_secure: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="Secure cookies: auto means when the request came over HTTPS (uvicorn "
        "believes X-Forwarded-Proto from --forwarded-allow-ips, 127.0.0.1 by default).",
    )
    cookie_samesite: Literal["lax", "strict", "none"] = Field(
        default="lax",
        description="SameSite of the session cookie; 'none' (always Secure) lets pages signed "
        "in inside a cross-site LMS iframe keep their session.",
    )
    allow_sign_up: bool = Field(default=True, description="Anyone may create a learner account.")
    sign_in_max_failures: int = Field(
        default=5, ge=1, description="Failed sign-ins per email within the window before a pause."
    )
    sign_in_window_seconds: int = Field(default=15 * 60, ge=1)
    submission_rate_limit: int = Field(
        default=10, ge=0, description="Submissions per learner within the window; 0: no limit."
    )
    submission_rate_window_seconds: int = Field(default=60, ge=1)

    @model_validator(mode="after")
    def _resolve_paths(self) -> Settings:
        # Resolved once, so that a later chdir cannot move the database.
        self.data_dir = self.data_dir.expanduser().resolve()
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'loopgrade.db'}"
        self.database_url = with_psycopg_driver(self.database_url)
        return self

    def retry_delay_seconds(self, attempt: int) -> float:
        """How long to wait before claim number `attempt` + 1 after a sandbox fault."""
        delay: float = self.retry_backoff_seconds * 2 ** max(0, attempt - 1)
        return min(delay, self.retry_backoff_max_seconds)

    @property
    def request_body_bytes(self) -> int:
        """Cap on a whole request body: the code JSON-escaped (up to 6x), or an uploaded file."""
        return max(6 * self.max_code_bytes, self.max_upload_bytes) + 64 * 1024


def with_psycopg_driver(database_url: str) -> str:
    """`postgresql://...` (as operators and libpq write it) with SQLAlchemy's psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if database_url.startswith(prefix):
            return "postgresql+psycopg://" + database_url.removeprefix(prefix)
    return database_url


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]
