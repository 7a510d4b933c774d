"""Whether a backend works on this host: find it, run a trivial program in it, and say what to
install or enable when it fails. `open_runner` and `check_available` (sandbox/__init__.py) ask.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

from sandbox import bwrap
from sandbox import docker as docker_backend
from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.limits import Limits

PROBE_PROGRAM = "import os\nos.write(3, b'ok')\n"
PROBE_LIMITS = Limits(wall_timeout_seconds=30.0, cpu_seconds=10.0)


def bwrap_binary() -> str:
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
def probe_bwrap(binary: str) -> None:
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


def probe_docker(settings: docker_backend.DockerSettings) -> None:
    """Check the engine, the image and the runtime, then run a trivial program in a container."""
    client = docker_backend.connect()
    try:
        docker_backend.check_engine(client, settings)
    finally:
        client.close()
    probe_docker_run_cached(settings)


@functools.cache  # only successes are cached: a failed probe raises
def probe_docker_run_cached(settings: docker_backend.DockerSettings) -> None:
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
