"""Server configuration: one `Settings` object, read from `LOOPGRADE_*` environment variables.

One object by design: every setting, its check and its words in one `Settings`, built once.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from fastapi import Depends, Request
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sandbox.capacity import default_pool_size, usable_cores

MAX_WORKERS = 64
# Grading threads per warm pool slot by default: while one reads its run's result, judges and
# stores it, and claims its next submission, the other's run has the slot. One a slot left the
# slot idle through that part (docs/performance.md#two-grading-threads-a-slot).
WORKERS_PER_SLOT = 2


class Settings(BaseSettings):
    """Everything an operator can set. Built once per process, by the CLI."""

    model_config = SettingsConfigDict(env_prefix="LOOPGRADE_", extra="ignore")

    data_dir: Path = Field(
        default=Path("data"), description="Where the SQLite database and other state live."
    )
    database_url: str = Field(
        default="", description="SQLAlchemy URL; empty means SQLite at <data_dir>/loopgrade.db."
    )
    # With the warm pool, WORKERS_PER_SLOT a slot; cold, a run keeps a core busy for seconds, so
    # more than one per core only queues on the CPU (docs/operations.md, bench/grade_load.py).
    worker_count: int = Field(
        default_factory=usable_cores,  # replaced below unless set: it follows the pool
        ge=1,
        le=MAX_WORKERS,
        description="Grading threads; default: two per pool slot, one per usable core cold.",
    )
    max_code_bytes: int = Field(
        default=64 * 1024, ge=1, description="Largest accepted submission, UTF-8 bytes."
    )
    max_upload_bytes: int = Field(
        default=1024 * 1024,
        ge=1,
        description="Largest accepted uploaded file (a notebook carries outputs besides code).",
    )
    sandbox: Literal["auto", "bwrap", "docker"] = Field(
        default="auto", description="Sandbox backend for learner code."
    )
    # A slot is one warm zygote running one sandbox at a time, capped at one core and at the
    # run's memory: one per usable core keeps every core busy, as many as the memory holds
    # (docs/operations.md).
    sandbox_pool_size: int = Field(
        default_factory=default_pool_size,
        ge=0,
        le=64,
        description="Warm sandbox pool slots in front of the backend; 0: cold runs only.",
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
        description="Secure cookies: auto means when the request came over HTTPS (as a "
        "trusted proxy's X-Forwarded-Proto says, behind one).",
    )
    trusted_proxies: str = Field(
        default="",
        description="Comma-separated addresses or networks (CIDR) of the reverse proxies in "
        "front of loopgrade, whose X-Forwarded-For and X-Forwarded-Proto are believed. Empty: "
        "none are, and the client address is the connection's.",
    )
    cookie_samesite: Literal["lax", "strict", "none"] = Field(
        default="lax",
        description="SameSite of the session cookie; 'none' (always Secure) lets pages signed "
        "in inside a cross-site LMS iframe keep their session.",
    )
    allow_sign_up: bool = Field(default=True, description="Anyone may create a learner account.")
    sign_up_max_per_address: int = Field(
        default=20,
        ge=1,
        description="Accounts made by sign-up from one client address within the sign-up "
        "window; more get 429 and Retry-After (a campus NAT signs up a class at once).",
    )
    sign_up_max: int = Field(
        default=500,
        ge=1,
        description="Accounts made by sign-up from all addresses within the sign-up window; "
        "more get 503 and Retry-After.",
    )
    sign_up_window_seconds: int = Field(default=3600, ge=1)
    sign_in_max_failures: int = Field(
        default=5,
        ge=1,
        description="Failed sign-ins to one account from one client address within the "
        "window before that address pauses for that account (five times as many from one "
        "address to any accounts).",
    )
    sign_in_window_seconds: int = Field(default=15 * 60, ge=1)
    sign_in_account_max_failures: int = Field(
        default=30,
        ge=1,
        description="Failed sign-ins to one account from all addresses within the account "
        "window before the account pauses, except for browsers that signed in to it before.",
    )
    sign_in_account_window_seconds: int = Field(default=3600, ge=1)
    password_reset_max_age_seconds: int = Field(
        default=3600, ge=60, description="How long a password reset link works (once)."
    )
    password_reset_max_live_links: int = Field(
        default=3,
        ge=1,
        description="Reset links one account may have working at once; a request beyond them "
        "mails nothing (the account's owner has a working link already) and is answered "
        "alike. Bounds the mail anyone can send an account without refusing its owner.",
    )
    password_reset_max_per_address: int = Field(
        default=20,
        ge=1,
        description="Password reset requests from one client address within the reset window; "
        "more get 429 and Retry-After.",
    )
    password_reset_window_seconds: int = Field(default=3600, ge=1)

    # Mail (password reset links). No host: each message is written to the server's log.
    smtp_host: str = Field(
        default="",
        description="SMTP server for outgoing mail; empty means mail is written to the "
        "server's log instead (the embedded default).",
    )
    smtp_port: int = Field(default=587, ge=1, le=65535, description="SMTP server port.")
    smtp_user: str = Field(default="", description="SMTP login; empty: no login.")
    smtp_password: str = Field(default="", description="SMTP password, with smtp_user.")
    smtp_tls: Literal["starttls", "tls", "none"] = Field(
        default="starttls",
        description="starttls: upgrade a plain connection (port 587); tls: TLS from the "
        "start (port 465); none: plain text (a relay on the same host only).",
    )
    smtp_timeout_seconds: float = Field(default=30.0, gt=0, description="SMTP socket timeout.")
    mail_from: str = Field(
        default="loopgrade <loopgrade@localhost>", description="From address of outgoing mail."
    )

    submission_rate_limit: int = Field(
        default=10, ge=0, description="Submissions per learner within the window; 0: no limit."
    )
    submission_rate_window_seconds: int = Field(default=60, ge=1)
    personal_token_max_days: int = Field(
        default=365,
        ge=1,
        description="The longest lifetime a learner may give a personal access token (the "
        "client's); the tokens page offers the lifetimes up to it.",
    )
    anonymous_submission_rate_limit: int = Field(
        default=10,
        ge=0,
        description="Practice submissions without an account from one client address within "
        "the submission window; 0: no limit.",
    )
    anonymous_submissions_per_hour_in_total: int = Field(
        default=1000,
        ge=0,
        description="Practice submissions without an account from all client addresses within "
        "an hour (each keeps its code, up to max_code_bytes); 0: no limit.",
    )
    max_waiting_submissions: int = Field(
        default=200,
        ge=0,
        description="Submissions queued or being graded before new ones get 503 and "
        "Retry-After (anonymous practice at half of it); 0: no cap.",
    )

    # Admission control in front of every route (app/admission.py, docs/operations.md).
    max_writes_in_flight: int = Field(
        default=16,
        ge=1,
        description="Requests that change state (submissions, forms) handled at once; more "
        "wait briefly, then get 503 and Retry-After. Sizes the threads and the database pool.",
    )
    max_reads_in_flight: int = Field(
        default=24,
        ge=1,
        description="Reads (pages, results, the API's GETs) handled at once; more wait "
        "briefly, then get 503 and Retry-After. Sizes the threads and the database pool.",
    )
    admission_wait_seconds: float = Field(
        default=1.0,
        ge=0,
        description="How long a request over its lane's capacity waits for a slot before "
        "its 503 (at most eight waiting per slot; more are answered at once).",
    )
    request_body_timeout_seconds: float = Field(
        default=20.0,
        gt=0,
        description="A request body must arrive whole within this; a slower one gets 408.",
    )

    # Grading progress pushed to the pages and the API (app/progress.py).
    max_event_streams: int = Field(
        default=200,
        ge=1,
        description="Progress streams (GET /submissions/{id}/events) open at once in this "
        "process; more get 503 and the page falls back to asking every few seconds.",
    )
    max_event_streams_per_client: int = Field(
        default=8,
        ge=1,
        description="Progress streams one client address may hold open at once; more get "
        "503 and the page asks every few seconds instead.",
    )
    max_event_streams_per_submission: int = Field(
        default=4,
        ge=1,
        description="Progress streams one submission may have open at once (its tabs).",
    )
    event_stream_max_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How long one progress stream stays open; the browser then reconnects.",
    )
    event_check_interval_seconds: float = Field(
        default=2.0,
        gt=0,
        description="How often an open stream reads its submission from the database: the "
        "fallback for a result whose push was lost (Redis away) or never sent (a RabbitMQ "
        "broker). This process's own workers, and Celery workers through the broker's Redis, "
        "wake the stream as soon as they change the submission.",
    )
    event_heartbeat_seconds: float = Field(
        default=15.0,
        gt=0,
        description="A stream with nothing new sends a heartbeat this often (proxies close "
        "idle connections).",
    )

    # This server's address (app/hosts.py, docs/security.md#host-and-links).
    public_url: str = Field(
        default="",
        description="The address LMSs and browsers reach this server at, e.g. "
        "https://grader.example.edu: every absolute link (mailed reset links, the tool's LTI "
        "URLs) is built on it, and requests for another Host are refused. Required with "
        "smtp_host; empty means the address each request came to, which must be a loopback "
        "name, the address the server listens on, or one of allowed_hosts.",
    )
    allowed_hosts: str = Field(
        default="",
        description="Comma-separated further host names requests may name in Host (besides "
        "the public URL's, loopback names and the listening address), e.g. the name a "
        "proxy forwards; links are never built on them.",
    )

    # LTI 1.3 (docs/lti.md).
    lti_leeway_seconds: int = Field(
        default=60,
        ge=0,
        le=600,
        description="Clock skew allowed on an LTI id_token's exp and iat (platforms' clocks "
        "often run ahead).",
    )
    lti_state_max_age_seconds: int = Field(
        default=600, ge=30, description="How long an LTI login may take from start to launch."
    )
    lti_max_logins_per_address: int = Field(
        default=100,
        ge=1,
        description="LTI logins started from one client address within the login's lifetime "
        "(lti_state_max_age_seconds); more get 429 and Retry-After. A school's NAT starts a "
        "class's worth at once.",
    )
    lti_max_logins: int = Field(
        default=20000,
        ge=1,
        description="LTI logins started from all addresses within the login's lifetime; more "
        "get 503 and Retry-After. Each is a row of about 1 KB until it expires.",
    )
    lti_key_encryption_keys: str = Field(
        default="",
        description="Fernet keys (comma-separated) sealing the tool's LTI private keys in the "
        "database; the first seals, all unseal (for rotating it). Empty means a key made once "
        "in <data_dir>/lti_key_encryption_key. Set it alike on every host of one database.",
    )
    webhook_allow_private_addresses: bool = Field(
        default=False,
        description="Allow course webhooks to loopback and private addresses, and plain http "
        "(for tests and development; otherwise an instructor could aim the server at internal "
        "services). Checked when a webhook is added and again at every delivery.",
    )
    lti_jwks_refetch_interval_seconds: float = Field(
        default=5.0,
        ge=0,
        description="Least time between two fetches of one platform's JWKS on unknown key ids.",
    )

    # Deliveries to other systems (app/outbox.py).
    outbox_max_attempts: int = Field(
        default=10, ge=1, description="Tries of one delivery before it is recorded as failed."
    )
    outbox_retry_base_seconds: float = Field(
        default=5.0, gt=0, description="Wait before the first retry; doubled after each failure."
    )
    outbox_retry_max_seconds: float = Field(
        default=3600.0, gt=0, description="Longest wait between two tries of one delivery."
    )
    outbox_claim_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="A delivery not finished by then (its host died) is tried again.",
    )

    @model_validator(mode="after")
    def _default_worker_count(self) -> Settings:
        if "worker_count" not in self.model_fields_set:
            # A prefork Celery worker's children run cold (app/grading/celery_queue.py).
            warm = self.sandbox_pool_size and self.worker_pool == "threads"
            self.worker_count = (
                min(WORKERS_PER_SLOT * self.sandbox_pool_size, MAX_WORKERS)
                if warm
                else usable_cores()
            )
        return self

    @model_validator(mode="after")
    def _resolve_paths(self) -> Settings:
        # Resolved once, so that a later chdir cannot move the database.
        self.data_dir = self.data_dir.expanduser().resolve()
        if not self.database_url:
            self.database_url = sqlite_database_url(self.data_dir)
        self.database_url = with_psycopg_driver(self.database_url)
        return self

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, value: str) -> str:
        if not value:
            return value
        parts = urlsplit(value)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.username is not None
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
        ):
            raise ValueError(
                f"{value!r} is not a server's address: write it as https://host or "
                "https://host:port, with no path"
            )
        return value.rstrip("/")

    @field_validator("trusted_proxies")
    @classmethod
    def _check_networks(cls, value: str) -> str:
        for entry in filter(None, (part.strip() for part in value.split(","))):
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network") from None
        return value

    @property
    def trusted_proxy_networks(self) -> list[str]:
        """The trusted proxies as networks ('10.0.0.7' is '10.0.0.7/32')."""
        return [
            str(ipaddress.ip_network(part.strip(), strict=False))
            for part in self.trusted_proxies.split(",")
            if part.strip()
        ]

    def retry_delay_seconds(self, attempt: int) -> float:
        """How long to wait before claim number `attempt` + 1 after a sandbox fault."""
        delay: float = self.retry_backoff_seconds * 2 ** max(0, attempt - 1)
        return min(delay, self.retry_backoff_max_seconds)

    @property
    def request_body_bytes(self) -> int:
        """Cap on a whole request body: the code JSON-escaped (up to 6x), or an uploaded file."""
        return max(6 * self.max_code_bytes, self.max_upload_bytes) + 64 * 1024


def sqlite_database_url(data_dir: Path) -> str:
    """The default database: SQLite in the data directory."""
    return f"sqlite:///{data_dir.expanduser().resolve() / 'loopgrade.db'}"


def with_psycopg_driver(database_url: str) -> str:
    """`postgresql://...` (as operators and libpq write it) with SQLAlchemy's psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if database_url.startswith(prefix):
            return "postgresql+psycopg://" + database_url.removeprefix(prefix)
    return database_url


async def get_settings(request: Request) -> Settings:
    # async: a plain `def` dependency runs in a worker thread, a hop of 0.1-0.3 ms of CPU, for
    # reading an attribute (docs/performance.md#few-thread-hops-a-request).
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]
