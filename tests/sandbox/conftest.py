"""Shared pieces for the sandbox tests: small limits, and a host-side view of a run's processes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyseccomp
import pytest

import sandbox
from sandbox import Limits, RunResult, backends, cgroups, run
from sandbox import docker as docker_backend

# Small, so that hitting a limit is quick. The wall timeout is generous because other runs may
# share the cores: a test that means to hit another limit must not time out instead.
FAST = Limits(
    wall_timeout_seconds=60.0,
    cpu_seconds=3.0,
    startup_cpu_seconds=3.0,
    memory_bytes=256 << 20,
    max_processes=16,
    file_size_bytes=1 << 20,
    open_files=64,
    output_bytes=64 << 10,
    payload_bytes=64 << 10,
    scratch_bytes=8 << 20,
)
# How a sandboxed program's command line ends, whichever interpreter the backend has.
SANDBOX_ARGV = [b"-I", b"/sandbox/main.py"]
BACKENDS = tuple(backends.BACKENDS)
RT_SIGTIMEDWAIT = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, "rt_sigtimedwait")


# For the tests of a warm pool: a root server, or one whose own groups are delegated to it
# (cgroup v1 or v2).
POOL_NEEDS_GROUPS = pytest.mark.skipif(
    cgroups.unavailable_reason() is not None,
    reason=f"the warm pool needs groups of its own: {cgroups.unavailable_reason()}",
)


def fast(**changes: Any) -> Limits:
    """FAST with `changes`. The test programs mark no end of set-up (sandbox/supervise.py), so
    a CPU cap given alone holds for their whole run."""
    if "cpu_seconds" in changes:
        changes.setdefault("startup_cpu_seconds", changes["cpu_seconds"])
    return dataclasses.replace(FAST, **changes)


# The host CPU the waiting tests crowd: a task pinned there waits for a core behind spinners().
CROWDED_CPU = max(os.sched_getaffinity(0))


@contextlib.contextmanager
def spinners(count: int, cpu: int = CROWDED_CPU) -> Iterator[list[int]]:
    """`count` host processes spinning on `cpu` only (pinned before they start), until the block
    ends: a task pinned there gets a share of it, and waits for a core the rest of the time.
    Each in a session of its own: where the kernel groups tasks by session (autogroup), the
    spinners then weigh as `count` groups, not one."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
            start_new_session=True,
        )
        for _ in range(count)
    ]
    try:
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait()


def sandbox_pids_with_marker(marker: str) -> list[int]:
    """Host pids of sandboxed programs whose scratch holds /tmp/<marker> (so: of one run)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if cmdline.read().split(b"\0")[1:-1] != SANDBOX_ARGV:
                    continue
            if os.path.exists(f"/proc/{entry}/root/tmp/{marker}"):
                found.append(int(entry))
        except OSError:
            continue
    return found


def wait_for_processes(marker: str, count: int, timeout_seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        pids = sandbox_pids_with_marker(marker)
        if len(pids) >= count:
            return pids
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} sandboxed processes with /tmp/{marker} appeared")


def wait_for_release(marker: str) -> str:
    """Program lines that wait until the test calls release(): it can look at the run meanwhile."""
    return (
        "import signal as _signal\n"
        "_signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGUSR1})\n"
        f"open('/tmp/{marker}', 'w').close()\n"
        "_signal.sigwait({_signal.SIGUSR1})\n"
    )


def waiting_at_barrier(marker: str) -> list[int]:
    """Host pids of the programs waiting in wait_for_release(marker), whatever started them
    (bwrap, a container's init, a warm pool's zygote): each has /tmp/<marker> in its root and
    sits in sigwait, unlike what it started before and the processes around it."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if not os.path.exists(f"/proc/{entry}/root/tmp/{marker}"):
                continue
            with open(f"/proc/{entry}/syscall") as syscall:
                number = syscall.read().split()[0]
        except (OSError, IndexError):
            continue
        if number == str(RT_SIGTIMEDWAIT):
            found.append(int(entry))
    return found


def release(pids: list[int]) -> None:
    """Let the run's program go on past wait_for_release().

    The program is the first of the run's processes in its PID namespace: PID 1 under bwrap,
    the init's child under docker; the others are what it forked.
    """

    def namespace_pid(pid: int) -> int:
        with open(f"/proc/{pid}/status") as status:
            return int(next(line.split()[-1] for line in status if line.startswith("NSpid:")))

    if not pids:
        raise AssertionError("no sandboxed process to release")
    os.kill(min(pids, key=namespace_pid), signal.SIGUSR1)


def uid_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Uid:"):
                return int(line.split()[1])  # the real uid, as the host sees it
    raise AssertionError(f"no Uid line for {pid}")


def host_pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if uid_of(int(entry)) == uid:
                    pids.append(int(entry))
            except (OSError, AssertionError):
                continue
    return pids


def docker_unavailable_reason(runtime: str | None = None) -> str | None:
    """Why docker runs cannot be tested here, or None when they can."""
    settings = docker_backend.DockerSettings.from_environment()
    if runtime:
        settings = docker_backend.DockerSettings(
            image=settings.image, runtime=runtime, user=settings.user, stage_dir=settings.stage_dir
        )
    try:
        client = docker_backend.connect()
        try:
            docker_backend.check_engine(client, settings)
        finally:
            client.close()
    except sandbox.SandboxUnavailable as error:
        return str(error)
    return None


def sandbox_containers() -> list[str]:
    """Names of the sandbox containers this test process started that still exist."""
    client = docker_backend.connect()
    try:
        filters = {"label": [docker_backend.LABEL, f"{docker_backend.PID_LABEL}={os.getpid()}"]}
        containers = client.api.containers(all=True, filters=filters)
    finally:
        client.close()
    return [str(container["Names"][0]) for container in containers]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each backend in turn, as LOOPGRADE_SANDBOX; one this host lacks is skipped."""
    name: str = request.param
    monkeypatch.setenv("LOOPGRADE_SANDBOX", name)
    monkeypatch.delenv("LOOPGRADE_DOCKER_RUNTIME", raising=False)
    try:
        sandbox.check_available()
    except sandbox.SandboxUnavailable as error:
        pytest.skip(f"no {name} sandbox on this host: {error}")
    return name


@pytest.fixture
def start_run() -> Iterator[Callable[..., Future[RunResult]]]:
    """Start run() in a background thread, to look at the sandbox from the host meanwhile."""
    with ThreadPoolExecutor(max_workers=4) as pool:

        def start(
            program: str, limits: Limits, inputs: dict[str, bytes] | None = None
        ) -> Future[RunResult]:
            return pool.submit(run, program, inputs or {}, limits)

        yield start
