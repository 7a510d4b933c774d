"""What one sandbox run returns. Everything in it came from untrusted code, except the flags."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run: exit status, which cap (if any) ended it, and capped outputs.

    The flags are set by the supervisor outside the sandbox, never by the code inside.
    `payload`, `stdout` and `stderr` are untrusted bytes, already cut to their caps.
    """

    exit_code: int | None  # None when killed by a signal
    signal: int | None  # the signal that ended the main process, if any
    timed_out: bool  # wall clock
    cpu_time_exceeded: bool
    memory_exceeded: bool
    process_limit_exceeded: bool
    file_size_exceeded: bool
    open_files_exceeded: bool
    output_truncated: bool  # stdout + stderr passed output_bytes
    payload_truncated: bool  # the result channel passed payload_bytes
    wall_seconds: float
    cpu_seconds: float  # after the program's set-up (all of it, when it marked none)
    peak_memory_bytes: int | None  # None when the backend cannot measure it
    payload: bytes
    stdout: bytes
    stderr: bytes
    startup_cpu_seconds: float | None = None  # the set-up's, when the program marked its end
    # The longest one task of the run (of this part) spent waiting for a core, as the host last
    # saw it; None where the backend cannot see the run's tasks (sandbox/supervise.py).
    waited_seconds: float | None = None
    # time.monotonic() (one clock for the whole host) when this part began: the run's start,
    # or for `after_request`, the moment the later input was given.
    started_monotonic: float | None = None
    # With a later input (sandbox/supervise.py): this result is the part of the run before the
    # program asked for it (the whole run, if it never asked), and this the part after.
    after_request: RunResult | None = None

    @property
    def limit_hit(self) -> str | None:
        """The name of the first cap that ended the run, or None."""
        for name in (
            "timed_out",
            "cpu_time_exceeded",
            "memory_exceeded",
            "process_limit_exceeded",
            "file_size_exceeded",
            "open_files_exceeded",
            "output_truncated",
            "payload_truncated",
        ):
            if getattr(self, name):
                return name
        return None
