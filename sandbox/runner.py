"""What every backend's runner is (`Runner`), below the backends and the registry of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sandbox.limits import Limits
from sandbox.result import RunResult


class Runner(Protocol):
    """Runs programs in sandboxes of one backend, chosen and probed once."""

    @property
    def name(self) -> str:
        """The backend: bwrap or docker."""

    @property
    def status(self) -> str:
        """One line for logs and status pages: the backend, and the pool's state."""

    def run(
        self,
        program: str,
        inputs: Mapping[str, bytes],
        limits: Limits,
        later_input: bytes | None = None,
    ) -> RunResult:
        """Run Python source `program` in a fresh sandbox, with each input at /sandbox/<name>,
        and `later_input` on its stdin once it asks for it (sandbox/supervise.py).

        Raises ValueError for a bad input name, limit or later input, SandboxError when the
        sandbox itself fails. A learner's failure (an exception, a limit hit) is a RunResult,
        never an exception.
        """

    def close(self) -> None:
        """Stop what the runner keeps running (a pool's zygotes)."""
