"""Running untrusted code: backends and limits (the harness that runs in it is graders/harness.py).

    from sandbox import run, Limits
    result = run(source, {"cases.json": data}, Limits(wall_timeout_seconds=5))
    result.payload      # what the program wrote to fd 3 (untrusted, capped)
    result.limit_hit    # "timed_out", "memory_exceeded", ... or None

Settings (environment):
    LOOPGRADE_SANDBOX        bwrap | docker | auto (default). auto uses the first backend that
                             works here, in that order.
    LOOPGRADE_BWRAP          the bwrap binary (default: `bwrap` on PATH).
    LOOPGRADE_SANDBOX_UIDS   uids for bwrap runs when the server is root
                             (default 2000000000-2000000063).
    LOOPGRADE_DOCKER_*       the docker backend's image, runtime (runsc), user and staging
                             directory: see sandbox/docker.py.
A host where no backend works refuses to run anything: run() raises SandboxUnavailable.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from sandbox import bwrap
from sandbox import docker as docker_backend
from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.limits import Limits
from sandbox.result import RunResult

__all__ = [
    "Limits",
    "RunResult",
    "SandboxError",
    "SandboxUnavailable",
    "backend_name",
    "check_available",
    "run",
]

BACKENDS = ("bwrap", "docker")  # in the order `auto` tries them
PROBE_PROGRAM = "import os\nos.write(3, b'ok')\n"
PROBE_LIMITS = Limits(wall_timeout_seconds=30.0, cpu_seconds=10.0)


def run(program: str, inputs: Mapping[str, bytes], limits: Limits) -> RunResult:
    """Run Python source `program` in a fresh sandbox, with each input at /sandbox/<name>.

    Raises ValueError for a bad input name or limit, SandboxUnavailable when this host has no
    working sandbox, SandboxError when the sandbox itself fails. A learner's failure (an
    exception, a limit hit) is a RunResult, never an exception.
    """
    bwrap.check_request(program, inputs, limits)
    if backend_name() == "docker":  # refuses to go on without a working sandbox
        settings = docker_backend.DockerSettings.from_environment()
        return docker_backend.run_program(settings, program, inputs, limits)
    return bwrap.run_program(_bwrap_binary(), program, inputs, limits)


def backend_name() -> str:
    """The backend run() uses here; raises SandboxUnavailable if none works."""
    setting = os.environ.get("LOOPGRADE_SANDBOX", "auto")
    if setting not in ("auto", *BACKENDS):
        raise SandboxUnavailable(
            f"LOOPGRADE_SANDBOX={setting!r} is not a sandbox backend: use one of "
            f"{', '.join(('auto', *BACKENDS))}"
        )
    failures = []
    for name in BACKENDS if setting == "auto" else (setting,):
        try:
            if name == "bwrap":
                _probe_bwrap(_bwrap_binary())
            else:
                _probe_docker(docker_backend.DockerSettings.from_environment())
        except SandboxUnavailable as error:
            if setting != "auto":
                raise
            failures.append(f"{name}: {error}")
            continue
        return name
    raise SandboxUnavailable(
        "no sandbox backend works on this host. " + " | ".join(failures)
    ) from None


def check_available() -> None:
    """Raise SandboxUnavailable, with what to install or enable, unless a backend works here."""
    backend_name()


def _bwrap_binary() -> str:
    configured = os.environ.get("LOOPGRADE_BWRAP")
    found = configured if configured else shutil.which("bwrap")
    if not found or not os.access(found, os.X_OK):
        where = (
            f"LOOPGRADE_BWRAP={configured!r} is not an executable"
            if configured
            else "no `bwrap` on PATH"
        )
        raise SandboxUnavailable(
            f"bubblewrap is not installed ({where}). Install it: apt-get install bubblewrap"
        )
    return found


@functools.cache  # only successes are cached: a failed probe raises
def _probe_bwrap(binary: str) -> None:
    """Run a trivial program in a real sandbox; raise SandboxUnavailable saying why it failed."""
    try:
        result = bwrap.run_program(binary, PROBE_PROGRAM, {}, PROBE_LIMITS)
    except SandboxError as error:
        raise SandboxUnavailable(_explain(binary, str(error))) from error
    if result.exit_code != 0 or result.payload != b"ok":
        stderr = result.stderr.decode(errors="replace").strip()
        raise SandboxUnavailable(
            _explain(binary, f"a trivial program failed (exit {result.exit_code}): {stderr}")
        )


def _probe_docker(settings: docker_backend.DockerSettings) -> None:
    """Check the engine, the image and the runtime, then run a trivial program in a container."""
    client = docker_backend.connect()
    try:
        docker_backend.check_engine(client, settings)
    finally:
        client.close()
    _probe_docker_run(settings)


@functools.cache  # only successes are cached: a failed probe raises
def _probe_docker_run(settings: docker_backend.DockerSettings) -> None:
    try:
        result = docker_backend.run_program(settings, PROBE_PROGRAM, {}, PROBE_LIMITS)
    except SandboxError as error:
        raise SandboxUnavailable(f"docker cannot run a sandbox container: {error}") from error
    if result.exit_code != 0 or result.payload != b"ok":
        stderr = result.stderr.decode(errors="replace").strip()
        raise SandboxUnavailable(
            f"docker: a trivial program failed in {settings.image} "
            f"(exit {result.exit_code}): {stderr}"
        )


def _explain(binary: str, failure: str) -> str:
    hints = []

    def sysctl(name: str) -> str | None:
        try:
            return Path("/proc/sys", name).read_text().strip()
        except OSError:
            return None

    if sysctl("user/max_user_namespaces") == "0":
        hints.append("user namespaces are disabled: sysctl -w user.max_user_namespaces=10000")
    if sysctl("kernel/unprivileged_userns_clone") == "0":
        hints.append(
            "unprivileged user namespaces are disabled: "
            "sysctl -w kernel.unprivileged_userns_clone=1"
        )
    if sysctl("kernel/apparmor_restrict_unprivileged_userns") == "1":
        hints.append(
            "AppArmor restricts unprivileged user namespaces: give bwrap a profile that allows "
            "them, or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
        )
    if Path("/.dockerenv").exists():
        hints.append(
            "inside Docker, the default seccomp profile blocks user namespaces: run the "
            "container with a profile that allows them"
        )
    advice = "; ".join(hints) or "bwrap needs unprivileged user namespaces"
    return f"bubblewrap ({binary}) cannot create a sandbox: {failure}. Hint: {advice}"
