"""Running untrusted code: backends, limits, the warm pool (the harness is graders/harness.py).

    runner = open_runner("auto", pool=PoolProgram(source, warm_up_inputs), pool_size=2)
    result = runner.run(source, {"cases.json": data}, Limits(wall_timeout_seconds=5))
    result.payload      # what the program wrote to fd 3 (untrusted, capped)
    result.limit_hit    # "timed_out", "memory_exceeded", ... or None
    # With an input given only when the program asks for it (fd 5), the run in two parts:
    before = runner.run(source, inputs, limits, later_input=data)   # the part before the request
    before.after_request                                            # the part after it, or None

A server opens one Runner at start-up: the backend is chosen and probed once, and a warm pool
(sandbox.pool) is started in front of it when asked for. `run()` is the same for the debugging
CLI and the tests: it opens a cold runner from the environment on every call.

Settings (the server passes its own; `run()` reads the environment):
    LOOPGRADE_SANDBOX        bwrap | docker | auto (default). auto uses the first backend that
                             works here, in that order.
    LOOPGRADE_BWRAP          the bwrap binary (default: `bwrap` on PATH).
    LOOPGRADE_SANDBOX_UIDS   uids for bwrap runs and pool slots when the server is root
                             (default 2000000000-2000000063).
    LOOPGRADE_DOCKER_*       the docker backend's image, runtime (runsc), user and staging
                             directory: see sandbox/docker.py.
A host where no backend works refuses to run anything: SandboxUnavailable.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sandbox import pool as pool_module
from sandbox.backends import BACKENDS, Backend
from sandbox.bwrap import BwrapRunner
from sandbox.docker import DockerRunner
from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.limits import Limits
from sandbox.result import RunResult
from sandbox.runner import Runner
from sandbox.supervise import check_request

__all__ = [
    "BwrapRunner",
    "DockerRunner",
    "Limits",
    "PoolProgram",
    "PoolRunner",
    "RunResult",
    "Runner",
    "SandboxError",
    "SandboxUnavailable",
    "backend_name",
    "check_available",
    "open_runner",
    "run",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolProgram:
    """The one program a warm pool runs, and the trusted inputs its zygotes warm up on.

    The warm-up inputs end up in every child's memory: they must hold no secret and no
    expected value. The zygotes import torch (pinned to one thread) before the warm-up, unless
    `imports_torch` is False: for a program that never uses it (a test's, where importing it
    is slow).
    """

    source: str
    warm_up_inputs: Mapping[str, bytes] = field(default_factory=dict)
    imports_torch: bool = True


class PoolRunner:
    """A warm pool for its program, in front of a cold runner for everything else."""

    def __init__(self, pool: pool_module.Pool, cold: Runner) -> None:
        self.pool = pool
        self.cold = cold
        self.name = cold.name

    @property
    def status(self) -> str:
        return (
            f"{self.cold.name} with a warm pool: {self.pool.ready_slots} of "
            f"{len(self.pool.slots)} slots ready"
        )

    def run(
        self,
        program: str,
        inputs: Mapping[str, bytes],
        limits: Limits,
        later_input: bytes | None = None,
    ) -> RunResult:
        if program != self.pool.program:
            return self.cold.run(program, inputs, limits, later_input)
        try:
            return self.pool.run_program(inputs, limits, later_input)
        except SandboxUnavailable as error:  # no slot could start again: cold until one can
            log.warning("warm pool unavailable (%s): running cold", error)
            return self.cold.run(program, inputs, limits, later_input)

    def close(self) -> None:
        self.pool.close()


def open_runner(
    backend: str = "auto", *, pool: PoolProgram | None = None, pool_size: int = 0
) -> Runner:
    """Choose the backend (auto: the first that works), probe it, start the pool if asked.

    Raises SandboxUnavailable when no backend works. A pool that cannot start is logged, and
    the runner runs cold.
    """
    chosen, cold = _cold_runner(backend)
    if pool is None or pool_size == 0:
        return cold
    from sandbox import seccomp

    try:
        outer = chosen.pool_outer(cold)
    except SandboxUnavailable as error:
        log.warning("sandbox: %s; every run is cold", error)
        return cold
    warm = pool_module.Pool(
        outer,
        pool.source,
        pool.warm_up_inputs,
        # The cold runs' own filter, so that the same code meets the same refusals either way.
        seccomp.run_filter().bpf,
        size=pool_size,
        imports_torch=pool.imports_torch,
    )
    try:
        warm.start()
    except SandboxUnavailable as error:
        warm.close()
        log.warning("sandbox: %s; every run is cold", error)
        return cold
    return PoolRunner(warm, cold)


def run(
    program: str, inputs: Mapping[str, bytes], limits: Limits, later_input: bytes | None = None
) -> RunResult:
    """Run `program` on a cold runner chosen from the environment now (the CLI's, the tests')."""
    check_request(program, inputs, limits)
    _, runner = _cold_runner(os.environ.get("LOOPGRADE_SANDBOX", "auto"))
    return runner.run(program, inputs, limits, later_input)


def backend_name() -> str:
    """The backend run() uses here; raises SandboxUnavailable if none works."""
    return _cold_runner(os.environ.get("LOOPGRADE_SANDBOX", "auto"))[1].name


def check_available() -> None:
    """Raise SandboxUnavailable, with what to install or enable, unless a backend works here."""
    backend_name()


def _cold_runner(setting: str) -> tuple[Backend[Any], Runner]:
    """The backend `setting` names (auto: the first in BACKENDS that works here) and its cold
    runner."""
    if setting not in ("auto", *BACKENDS):
        raise SandboxUnavailable(
            f"LOOPGRADE_SANDBOX={setting!r} is not a sandbox backend: use one of "
            f"{', '.join(('auto', *BACKENDS))}"
        )
    failures = []
    for name in BACKENDS if setting == "auto" else (setting,):
        try:
            return BACKENDS[name], BACKENDS[name].open()
        except SandboxUnavailable as error:
            if setting != "auto":
                raise
            failures.append(f"{name}: {error}")
    raise SandboxUnavailable(
        "no sandbox backend works on this host. " + " | ".join(failures)
    ) from None
