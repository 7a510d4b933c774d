"""The docker backend: one fresh container per run, from the grading runtime image.

One backend, one module: the docker backend's cold runs and its pool's slot containers share its
engine calls and settings.

    settings = DockerSettings.from_environment()
    result = run_program(settings, source, {"cases.json": data}, Limits())

For each run the program, its inputs, the container init (sandbox/container_init.py) and the
compiled seccomp filter are written to a staging directory on the host and bind-mounted
read-only at /sandbox and /opt/loopgrade/init. The container has no network, a read-only root, a
size-capped tmpfs at /tmp, no capabilities, no-new-privileges, a non-root user, no IPC with
anyone (no /dev/shm), pids, memory (swap equal), CPU and ulimit caps, no logging, and the engine
removes it when it ends; the init stacks the filter on the engine's own profile. This module
attaches to its output before starting it and gives the shared supervisor (sandbox/supervise.py)
the init's frames (the program's stdout, stderr, result channel and end of set-up), the
container's cgroups as this host sees them (when it can), and the kill.

In front of it, a warm pool (sandbox.pool) can keep its slots in long-lived containers of the
same image, each running the pool's zygote: ContainerOuter, below.

Settings (environment):
    LOOPGRADE_DOCKER_IMAGE      grading runtime image (default loopgrade-runtime:latest), built by
                                scripts/build-images.sh
    LOOPGRADE_DOCKER_RUNTIME    OCI runtime registered with the engine, e.g. runsc for gVisor
                                (default: the engine's default, runc)
    LOOPGRADE_DOCKER_USER       uid:gid a cold run's program runs as (default 65534:65534); never
                                root (a pool's slot runs as its uid of LOOPGRADE_SANDBOX_UIDS)
    LOOPGRADE_DOCKER_STAGE_DIR  where run directories are staged (default: the temp directory);
                                the engine must see it at the same path
    DOCKER_HOST, ...            which engine, as for the docker command
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox import host_view, pool, seccomp
from sandbox.cgroups import CGROUP_ROOT, RunCgroups, own_path
from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.limits import Limits
from sandbox.pipes import readable
from sandbox.result import RunResult
from sandbox.supervise import (
    ENVIRONMENT,
    PROGRAM_PATH,
    SANDBOX_DIR,
    SCRATCH_DIR,
    Channel,
    Supervisor,
    Usage,
    check_request,
)

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "loopgrade-runtime:latest"
DEFAULT_USER = "65534:65534"
PYTHON = "/opt/loopgrade/venv/bin/python3"  # where the Dockerfile puts the venv
INIT_DIR = "/opt/loopgrade/init"
INIT_SOURCE = Path(__file__).with_name("container_init.py")
SECCOMP_FILE = "seccomp.bpf"
LABEL = "loopgrade.sandbox"
# The supervising process, so that what a server (or a test) started can be told apart.
PID_LABEL = "loopgrade.supervisor-pid"

API_TIMEOUT_SECONDS = 30.0  # any one call to the engine; a teardown slower than this is hung
INIT_DEADLINE_MARGIN_SECONDS = 30.0  # the init ends the container itself if nobody else did
READ_BYTES = 65536
MAX_FRAME_BYTES = 1 << 20  # the init sends at most READ_BYTES per frame
INIT_STDERR_BYTES = 16 << 10
CPU_CORES = 1.0  # like bwrap's cpu cgroup: a run cannot starve the runs beside it
# gVisor's sentry runs the sandbox's processes on host threads and stub processes of its own:
# under a fork bomb held to 17 processes inside, the container's pids cgroup passed 700 tasks
# and kept growing, and a pids cap of 512 made the sandbox itself fail. So under runsc the
# process cap is RLIMIT_NPROC, which gVisor counts in its own kernel for this sandbox alone,
# and the pids cgroup is only a host-side backstop.
GVISOR_RUNTIME = "runsc"
STACK_BYTES = 8 << 20
GVISOR_PIDS_BACKSTOP = 4096
# A warm pool's slot container: its control socket's directory, the engine's masks it keeps (none
# under /proc: see ContainerOuter), its pids cap while the zygote warms up (the pool sets each
# job's), and how long its zygote may take to reach the socket (before it imports torch).
CONTROL_DIR = "/opt/loopgrade/control"
CONTROL_SOCKET = "zygote.sock"
SLOT_MASKED_PATHS = ["/sys/firmware"]
ZYGOTE_PIDS = 4096
SLOT_CONNECT_TIMEOUT_SECONDS = 60.0
USER_PATTERN = re.compile(r"[1-9][0-9]{0,9}:[1-9][0-9]{0,9}")
# The init's frames, by their channel byte.
FRAME_CHANNELS = {
    b"O": Channel.STDOUT,
    b"E": Channel.STDERR,
    b"P": Channel.PAYLOAD,
    b"S": Channel.STARTED,
    b"X": Channel.EXITED,  # its report: the program's status and usage
    b"R": Channel.REQUESTED,
}


@dataclass(frozen=True)
class DockerSettings:
    """Which image, runtime and user the containers use; read from LOOPGRADE_DOCKER_*."""

    image: str = DEFAULT_IMAGE
    runtime: str | None = None
    user: str = DEFAULT_USER
    stage_dir: str = ""

    @classmethod
    def from_environment(cls) -> DockerSettings:
        user = os.environ.get("LOOPGRADE_DOCKER_USER") or DEFAULT_USER
        if not USER_PATTERN.fullmatch(user):
            raise SandboxUnavailable(
                f"LOOPGRADE_DOCKER_USER={user!r} is not 'uid:gid' with both above 0 (never root)"
            )
        return cls(
            image=os.environ.get("LOOPGRADE_DOCKER_IMAGE") or DEFAULT_IMAGE,
            runtime=os.environ.get("LOOPGRADE_DOCKER_RUNTIME") or None,
            user=user,
            stage_dir=os.environ.get("LOOPGRADE_DOCKER_STAGE_DIR") or tempfile.gettempdir(),
        )


def connect() -> Any:
    """A client of the engine that DOCKER_HOST (or the default socket) names, checked with a ping.

    Raises SandboxUnavailable, saying what to install or start.
    """
    try:
        import docker
    except ImportError:
        raise SandboxUnavailable(
            "the docker Python package is missing: pip install docker (a loopgrade dependency)"
        ) from None
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=API_TIMEOUT_SECONDS)
        client.ping()
    except Exception as error:
        raise SandboxUnavailable(
            f"no Docker engine answers at {where} ({type(error).__name__}: {error}). "
            "Install and start one (apt-get install docker.io; dockerd), or set DOCKER_HOST"
        ) from None
    return client


def check_engine(client: Any, settings: DockerSettings) -> None:
    """Raise SandboxUnavailable unless the image is there and the runtime is registered."""
    import docker.errors

    try:
        client.api.inspect_image(settings.image)
    except docker.errors.ImageNotFound:
        raise SandboxUnavailable(
            f"the grading image {settings.image} is not on the Docker engine: build it with "
            "scripts/build-images.sh (or set LOOPGRADE_DOCKER_IMAGE)"
        ) from None
    if settings.runtime:
        runtimes = client.info().get("Runtimes") or {}
        if settings.runtime not in runtimes:
            raise SandboxUnavailable(
                f"LOOPGRADE_DOCKER_RUNTIME={settings.runtime!r} is not a runtime of the Docker "
                f"engine (it has {', '.join(sorted(runtimes)) or 'none'}): register it in the "
                "engine's daemon.json, see docs/security.md"
            )


def run_program(
    settings: DockerSettings,
    program: str,
    inputs: Mapping[str, bytes],
    limits: Limits,
    later_input: bytes | None = None,
) -> RunResult:
    """Run `program` at /sandbox/main.py with `inputs` beside it, in a fresh container (and
    `later_input` on request, on its stdin: sandbox/supervise.py)."""
    check_request(program, inputs, limits)
    client = connect()
    run = _Run(client, settings, limits, later_input)
    try:
        run.start(program, inputs)
        run.supervisor.watch(run)
        run.supervisor.finish(run.final_usage())
    finally:
        clean = run.close()
        client.close()
    if not clean:
        raise SandboxError(
            f"sandbox container {run.name} did not go away within {API_TIMEOUT_SECONDS:g} s; "
            "see the log"
        )
    result = run.result()
    log.debug(
        "docker sandbox run: container=%s exit=%s signal=%s limit=%s wall=%.2fs cpu=%.2fs",
        run.name, result.exit_code, result.signal, result.limit_hit, result.wall_seconds,
        result.cpu_seconds,
    )  # fmt: skip
    return result


def confined_host_config(
    api: Any,
    settings: DockerSettings,
    limits: Limits,
    *,
    mounts: list[Any],
    pids_limit: int,
    ulimits: list[Any],
    seccomp_profile: dict[str, object] | None = None,
    cgroup_parent: str | None = None,
) -> dict[str, Any]:
    """What every container of learner code gets, a cold run's or a pool slot's: no network,
    no IPC, a read-only root with a size-capped /tmp, no capability, no-new-privileges, memory
    (no swap on top), pids and one core, no core dumps, no log kept by the engine, removed by
    the engine once it ends (even if this server dies). `ulimits` add to the common ones;
    `seccomp_profile` replaces the engine's default profile."""
    from docker.types import LogConfig, Ulimit

    security_opt = ["no-new-privileges:true"]
    if seccomp_profile is not None:
        security_opt.append("seccomp=" + json.dumps(seccomp_profile))
    config: dict[str, Any] = api.create_host_config(
        mounts=mounts,
        network_mode="none",
        ipc_mode="none",  # a private IPC namespace and no /dev/shm to fill
        read_only=True,
        tmpfs={SCRATCH_DIR: f"rw,nosuid,nodev,noexec,size={limits.scratch_bytes},mode=1777"},
        cap_drop=["ALL"],
        security_opt=security_opt,
        pids_limit=pids_limit,
        mem_limit=limits.memory_bytes,
        memswap_limit=limits.memory_bytes,  # equal: no swap on top of the memory cap
        nano_cpus=int(CPU_CORES * 1e9),
        ulimits=[
            *ulimits,
            Ulimit(name="core", soft=0, hard=0),
            # As on a usual host (and under bwrap): a runaway recursion in C overflows its stack
            # and crashes, rather than growing until the memory cap.
            Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES),
            # /dev/mqueue is writable in every container: no POSIX message queue may be made
            # there (their memory is counted per host uid, across containers).
            Ulimit(name="msgqueue", soft=0, hard=0),
        ],
        log_config=LogConfig(type=LogConfig.types.NONE),
        auto_remove=True,
        runtime=settings.runtime,
        cgroup_parent=cgroup_parent,
    )
    return config


class _Streams:
    """Splits the engine's attach stream, then the init's frames, as bytes arrive."""

    def __init__(self) -> None:
        self.attach = bytearray()  # 8-byte header (stream, 0, 0, 0, size) and the bytes
        self.frames = bytearray()  # the init's: channel byte, 4-byte size, the bytes
        self.init_stderr = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """The complete frames (channel, bytes) of the init that `data` finishes."""
        self.attach += data
        while len(self.attach) >= 8:
            stream, size = struct.unpack(">BxxxL", self.attach[:8])
            if len(self.attach) < 8 + size:
                break
            chunk = bytes(self.attach[8 : 8 + size])
            del self.attach[: 8 + size]
            if stream == 1:
                self.frames += chunk
            else:  # the init's own stderr: its failures, never the program's
                self.init_stderr += chunk[: INIT_STDERR_BYTES - len(self.init_stderr)]
        frames = []
        while len(self.frames) >= 5:
            channel = bytes(self.frames[:1])
            (size,) = struct.unpack(">I", self.frames[1:5])
            if channel not in FRAME_CHANNELS or size > MAX_FRAME_BYTES:
                raise SandboxError(f"the container init sent a malformed frame ({channel!r})")
            if len(self.frames) < 5 + size:
                break
            frames.append((channel, bytes(self.frames[5 : 5 + size])))
            del self.frames[: 5 + size]
        return frames


class _Run:
    """One container, from staging its files to its removal."""

    def __init__(
        self, client: Any, settings: DockerSettings, limits: Limits, later_input: bytes | None
    ) -> None:
        self.client = client
        self.api = client.api
        self.settings = settings
        if settings.runtime == GVISOR_RUNTIME:
            # The container's CPU is its sandbox kernel's too, whose own work (freeing what a
            # torch import made, say) comes in lumps of a second or two at any moment, the end of
            # the part after the request included: no cap of a fraction of a second on that part
            # tells the program's CPU from it. The part is held by its plain wall backstop, as
            # for the waits no host reading sees here, and by the run's whole CPU cap.
            limits = dataclasses.replace(limits, later_cpu_seconds=limits.cpu_seconds)
        self.limits = limits
        self.name = f"loopgrade-run-{uuid.uuid4().hex[:16]}"
        self.stage: Path | None = None
        self.container_id: str | None = None
        self.sock: socket.socket | None = None
        self.response_socket: Any = None
        self.streams = _Streams()
        self.cgroups: RunCgroups | None = None
        self.init_pid = 0
        self.scratch_fd = -1  # the container's /tmp seen from the host, when it can be
        self.supervisor = Supervisor(limits, later_input)
        self.hung_up = False
        self.ended_by_engine = False  # the init ended without a report
        self.engine_status: int | None = None
        self.report: dict[str, Any] | None = None

    # -- start -----------------------------------------------------------------------------------

    def start(self, program: str, inputs: Mapping[str, bytes]) -> None:
        import docker.errors
        import requests

        self._stage_files(program, inputs)
        try:
            self._create()
            # stdin only for a later input: without one, the program's is /dev/null.
            stdin = int(self.supervisor.later_input is not None)
            params = {"stdin": stdin, "stdout": 1, "stderr": 1, "stream": 1, "logs": 0}
            # Attached before the start, so that not one byte of output is missed.
            self.response_socket = self.api.attach_socket(self.container_id, params=params)
            self.sock = getattr(self.response_socket, "_sock", self.response_socket)
            self.supervisor.start_clock()  # with the container, not while the engine creates it
            self.api.start(self.container_id)
        except (docker.errors.DockerException, requests.RequestException) as error:
            raise SandboxError(f"the Docker engine could not start a sandbox: {error}") from None
        self._find_host_view()

    def _stage_files(self, program: str, inputs: Mapping[str, bytes]) -> None:
        base = Path(self.settings.stage_dir)
        base.mkdir(parents=True, exist_ok=True)
        self.stage = Path(tempfile.mkdtemp(prefix="loopgrade-docker-", dir=base))
        files = {"sandbox": {"main.py": program.encode(), **inputs}}
        files["init"] = {
            "init.py": INIT_SOURCE.read_bytes(),
            SECCOMP_FILE: seccomp.run_filter().bpf,
        }
        for directory, contents in files.items():
            path = self.stage / directory
            path.mkdir(mode=0o755)
            path.chmod(0o755)  # whatever the umask: the container's user reads it
            for name, data in contents.items():
                (path / name).write_bytes(data)
                (path / name).chmod(0o444)

    def _create(self) -> None:
        from docker.types import Mount, Ulimit

        assert self.stage is not None
        limits = self.limits
        cpu_seconds = math.ceil(limits.startup_cpu_seconds + limits.cpu_seconds)
        ulimits = [
            # A backstop per process, a second past the limit: SIGXCPU, then SIGKILL. The kernel
            # checks it against CPU time sampled at each tick, which under the CPU quota ran
            # ahead of the precise time by up to 0.4 s in 6; the cgroup's precise time, polled,
            # holds the limit itself, and covers every process of the run together.
            Ulimit(name="cpu", soft=cpu_seconds + 1, hard=cpu_seconds + 2),
            Ulimit(name="fsize", soft=limits.file_size_bytes, hard=limits.file_size_bytes),
            Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
        ]
        # The init is one process of the group.
        processes = limits.max_processes + 1
        if self.settings.runtime == GVISOR_RUNTIME:
            pids_limit = GVISOR_PIDS_BACKSTOP
            ulimits.append(Ulimit(name="nproc", soft=processes, hard=processes))
        else:
            # Not RLIMIT_NPROC: it counts per host uid, over every container of that user.
            pids_limit = processes
        host_config = confined_host_config(
            self.api,
            self.settings,
            limits,
            mounts=[
                Mount(SANDBOX_DIR, str(self.stage / "sandbox"), type="bind", read_only=True),
                Mount(INIT_DIR, str(self.stage / "init"), type="bind", read_only=True),
            ],
            pids_limit=pids_limit,
            ulimits=ulimits,
        )
        init_config = {
            "argv": [PYTHON, "-I", PROGRAM_PATH],
            "env": ENVIRONMENT,
            "cwd": SCRATCH_DIR,
            # On top of the engine's own profile, which a profile of ours would replace.
            "seccomp_path": f"{INIT_DIR}/{SECCOMP_FILE}",
            "deadline_seconds": limits.wall_timeout_seconds + INIT_DEADLINE_MARGIN_SECONDS,
        }
        container = self.api.create_container(
            self.settings.image,
            command=[PYTHON, "-I", "-S", f"{INIT_DIR}/init.py", json.dumps(init_config)],
            entrypoint=[],
            user=self.settings.user,
            hostname="sandbox",
            working_dir=SCRATCH_DIR,
            # A later input is written to the attach socket, and the socket's write side shut
            # after it: the program's stdin then ends (docker-py sets StdinOnce with it).
            stdin_open=self.supervisor.later_input is not None,
            environment={"LANG": "C.UTF-8", "PATH": ENVIRONMENT["PATH"]},
            network_disabled=True,
            labels={LABEL: "run", PID_LABEL: str(os.getpid())},
            name=self.name,
            host_config=host_config,
            use_config_proxy=False,
        )
        self.container_id = str(container["Id"])

    def _find_host_view(self) -> None:
        """The container's cgroups (and, under runc, its processes and /tmp) as this host sees
        them: only when the engine runs here, on cgroup v1, and this process may look."""
        try:
            state = self.api.inspect_container(self.container_id)["State"]
            self.init_pid = int(state.get("Pid") or 0)
            if self.init_pid <= 0:
                return
            self.cgroups = container_cgroups(self.init_pid, str(self.container_id))
            # Under runc the init pid is the container's init, whose root is the container's;
            # under gVisor it is the sandbox kernel, and its processes are not host processes.
            root = f"/proc/{self.init_pid}/root"
            if os.path.exists(f"{root}{INIT_DIR}/init.py"):
                self.scratch_fd = os.open(f"{root}{SCRATCH_DIR}", os.O_RDONLY | os.O_DIRECTORY)
        except (OSError, KeyError, ValueError) as error:
            log.debug("container %s: no host view (%s)", self.name, error)

    # -- what the supervisor sees (sandbox.supervise.Process) -----------------------------------

    def wait_fds(self) -> list[int]:
        ended = self.hung_up or self.ended_by_engine or self.report is not None
        return [] if ended or self.sock is None else [self.sock.fileno()]

    def read(self, fd: int) -> list[tuple[Channel, bytes]]:
        assert self.sock is not None
        try:
            data = self.sock.recv(READ_BYTES)
        except OSError:  # the engine dropped the stream: as if it had ended
            data = b""
        if not data:
            self.ended_by_engine = True
            return [(Channel.EXITED, b"")]
        events: list[tuple[Channel, bytes]] = []
        for channel, chunk in self.streams.feed(data):
            if FRAME_CHANNELS[channel] is Channel.EXITED:
                self.report = _report(chunk)
                return [*events, (Channel.EXITED, b"")]
            events.append((FRAME_CHANNELS[channel], chunk))
        return events

    def usage(self) -> Usage:
        """The container's cgroups (and, under runc, its processes and /tmp), when seen here."""
        if self.cgroups is None:
            return Usage()
        limits = self.limits
        try:
            usage = Usage(
                cpu_seconds=self.cgroups.cpu_seconds(),
                peak_memory_bytes=self.cgroups.peak_memory_bytes(),
                oom_kills=self.cgroups.oom_kills(),
                process_limit_hits=self.cgroups.process_limit_hits(),
            )
            if self.scratch_fd >= 0:  # runc: the container's processes are host processes
                pids = self.cgroups.pids()
                usage = dataclasses.replace(
                    usage,
                    most_open_files=max(map(host_view.open_fd_count, pids), default=0),
                    file_size_cap_reached=host_view.file_size_cap_reached(
                        self.scratch_fd, limits.file_size_bytes
                    ),
                    task_wait_seconds=host_view.task_wait_seconds(pids),
                )
        except OSError:
            # The container has ended and its cgroups are gone: what it did is in its report.
            self.cgroups = None
            return Usage()
        return usage

    def kill(self) -> None:
        self._kill()

    def give(self, data: bytes) -> None:
        if self.sock is not None and not self.hung_up:
            with contextlib.suppress(OSError):  # the engine dropped the stream: the run is over
                self.sock.sendall(data)
                self.sock.shutdown(socket.SHUT_WR)

    def _kill(self) -> None:
        import docker.errors

        # Hang up first: the engine copies the container's output into this socket, and while
        # that copy is blocked (a flood nobody reads) it does not finish the kill.
        self._hang_up()
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            self.api.kill(self.container_id)  # SIGKILL; 409 when it has already stopped

    def _hang_up(self) -> None:
        self.hung_up = True
        if self.sock is not None:
            # shutdown(), not only close(): the HTTP response still holds the socket open.
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        for endpoint in (self.sock, self.response_socket):
            if endpoint is not None:
                with contextlib.suppress(OSError):
                    endpoint.close()

    # -- end -------------------------------------------------------------------------------------

    def final_usage(self) -> Usage:
        """After the run: the last cgroup readings, the init's report, and the container's end."""
        import docker.errors

        usage = self.usage()
        if self.report is None and not self.ended_by_engine:
            return usage  # killed by the supervisor: its reason is recorded already
        # The init's report or the engine's record; the cgroups may be gone already.
        oom_killed = False
        if self.cgroups is None:
            with contextlib.suppress(docker.errors.APIError):
                state = self.api.inspect_container(self.container_id)["State"]
                oom_killed = bool(state.get("OOMKilled"))
        if self.report is not None:
            # All the program's processes are gone; the init waits to be killed.
            self._kill()
            report = self.report
            largest = _number(report.get("largest_file_bytes"))
            max_rss = _number(report.get("max_rss_bytes"))
            peak = usage.peak_memory_bytes or (int(max_rss) if max_rss > 0 else None)
            return dataclasses.replace(
                usage,
                cpu_seconds=max(usage.cpu_seconds or 0.0, _number(report.get("cpu_seconds"))),
                peak_memory_bytes=peak,
                oom_kills=usage.oom_kills + int(oom_killed),
                file_size_cap_reached=(
                    usage.file_size_cap_reached or largest >= self.limits.file_size_bytes
                ),
            )
        # The init ended without its report: killed, or failed.
        self.engine_status = self._wait_for_exit()
        killed = self.engine_status == 128 + signal.SIGKILL
        if killed and self.settings.runtime != GVISOR_RUNTIME:
            # Under runc nothing inside can SIGKILL the init (PID 1 of its namespace), and we did
            # not: the kernel's OOM killer did, when the program left it no memory. gVisor's
            # kernel lets a process of the sandbox kill its init, so there a kill is only a kill.
            oom_killed = True
        elif not killed:
            failure = self.streams.init_stderr.decode(errors="replace").strip()
            raise SandboxError(
                f"the sandbox container's init ended without a report (status "
                f"{self.engine_status}): {failure or 'no message'}"
            )
        return dataclasses.replace(usage, oom_kills=usage.oom_kills + int(oom_killed))

    def _wait_for_exit(self) -> int | None:
        import docker.errors
        import requests

        try:
            return int(self.api.wait(self.container_id, timeout=API_TIMEOUT_SECONDS)["StatusCode"])
        except (docker.errors.NotFound, requests.RequestException, KeyError, ValueError):
            return None  # already removed, or it would not say

    def close(self) -> bool:
        """Kill and remove the container, drop the staged files; False if the container lives."""
        clean = True
        self._hang_up()
        if self.scratch_fd >= 0:
            os.close(self.scratch_fd)
            self.scratch_fd = -1
        if self.container_id is not None:
            clean = remove_container(self.api, self.container_id, self.name)
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
        return clean

    def result(self) -> RunResult:
        status = _number(self.report.get("status")) if self.report is not None else -1.0
        if status < 0:  # killed: by us, by the OOM killer, or by the init's own deadline
            return self.supervisor.result(None, signal.SIGKILL)
        if os.WIFSIGNALED(int(status)):
            return self.supervisor.result(None, os.WTERMSIG(int(status)))
        return self.supervisor.result(os.WEXITSTATUS(int(status)), None)


class ContainerOuter:
    """A warm pool's slots (sandbox.pool) in long-lived containers of the grading image.

    Each slot container runs the pool's zygote as its PID 1, as the slot's leased uid, with no
    network, a read-only root, no capability, no-new-privileges, no /dev/shm, a memory and a
    pids cap (set per job by the pool, through the container's cgroups as this host sees them)
    and a one-core CPU cap. Its seccomp profile is sandbox.seccomp.SLOT_CONTAINER: every run's
    refusals but clone with namespace flags and mount, which the zygote needs to make a job's
    namespaces; each job then loads the run filter itself. The engine masks parts of /proc with
    mounts over them, and the kernel then refuses a fresh /proc in a job's own pid namespace:
    the slot container has no masked or read-only path under /proc (/sys/firmware stays
    masked). The zygote reaches its control socket through a directory bind-mounted from the
    host (SCM_RIGHTS works across the mount namespace).
    """

    name = "docker"

    def __init__(self, settings: DockerSettings) -> None:
        if settings.runtime == GVISOR_RUNTIME:
            # gVisor's fork of a torch process took ~200 ms and its nested namespaces failed: it
            # is an outer layer per cold container, not a home for a fork-server.
            raise SandboxUnavailable("the warm pool does not run under gVisor (runsc)")
        self.settings = settings

    def start(
        self, index: int, uid: int, files: Mapping[str, bytes], config: dict[str, object]
    ) -> SlotContainer:
        zygote = SlotContainer(self.settings, index, uid)
        try:
            zygote.start(files, config)
        except BaseException:
            zygote.stop()
            raise
        return zygote

    def close(self) -> None:
        pass


class SlotContainer:
    """A zygote in its slot container (sandbox.pool.StartedZygote)."""

    def __init__(self, settings: DockerSettings, index: int, uid: int) -> None:
        self.settings = settings
        self.index = index
        self.uid = uid
        self.client = connect()
        self.api = self.client.api
        self.name = f"loopgrade-pool-{index}-{uuid.uuid4().hex[:12]}"
        self.stage: Path | None = None
        self.container_id: str | None = None
        self.listener: socket.socket | None = None
        self.control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # replaced at start
        self.zygote_pid = 0
        self.zygote_pidfd = -1
        self.cgroups = RunCgroups({})

    def start(self, files: Mapping[str, bytes], config: dict[str, object]) -> None:
        import docker.errors
        import requests

        base = Path(self.settings.stage_dir)
        base.mkdir(parents=True, exist_ok=True)
        self.stage = Path(tempfile.mkdtemp(prefix="loopgrade-pool-", dir=base))
        self.stage.chmod(0o755)
        for directory in ("sandbox", "control"):
            (self.stage / directory).mkdir(mode=0o755)
            (self.stage / directory).chmod(0o755)  # whatever the umask
        for name, data in files.items():
            (self.stage / "sandbox" / name).write_bytes(data)
            (self.stage / "sandbox" / name).chmod(0o444)
        # Only the slot's uid may connect (and the zygote is checked to be that uid).
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        socket_path = self.stage / "control" / CONTROL_SOCKET
        self.listener.bind(str(socket_path))
        os.chown(socket_path, self.uid, self.uid)
        socket_path.chmod(0o600)
        self.listener.listen(1)
        config = {**config, "control_path": f"{CONTROL_DIR}/{CONTROL_SOCKET}",
                  "kept_under_scratch": []}  # fmt: skip
        try:
            self._create(config, pool.ZYGOTE_LIMITS)
            output = self.api.attach(self.container_id, stdout=True, stderr=True, stream=True)
            threading.Thread(target=self._log, args=(output,), daemon=True).start()
            self.api.start(self.container_id)
            state = self.api.inspect_container(self.container_id)["State"]
            self.zygote_pid = int(state.get("Pid") or 0)
            if self.zygote_pid <= 0:
                raise SandboxError("the slot container ended at once (its log says why)")
            self.zygote_pidfd = os.pidfd_open(self.zygote_pid)
        except (docker.errors.DockerException, requests.RequestException) as error:
            raise SandboxError(
                f"the Docker engine could not start a slot container: {error}"
            ) from None
        # Read through the pid just opened: if it names this container, it is its zygote.
        try:
            cgroups = container_cgroups(self.zygote_pid, str(self.container_id))
        except OSError:  # no such process any more
            cgroups = None
        if cgroups is None and readable(self.zygote_pidfd, 0):
            raise SandboxError("the slot container ended at once (its log says why)")
        if cgroups is None:
            raise SandboxUnavailable(
                "the docker warm pool needs the containers' cgroup v1 memory, pids and cpuacct "
                "on this host (the engine on this machine, cgroup v1)"
            )
        self.cgroups = cgroups
        self._accept()

    def _create(self, config: dict[str, object], limits: Limits) -> None:
        from docker.types import Mount

        assert self.stage is not None
        # Its /tmp is the zygote's own (its warm-up's cwd); each job gets a fresh one of its
        # size. Logged here through the attach; if this server dies, the zygote sees its socket
        # close and ends, and the engine removes the container.
        host_config = confined_host_config(
            self.api,
            self.settings,
            limits,
            mounts=[
                Mount(SANDBOX_DIR, str(self.stage / "sandbox"), type="bind", read_only=True),
                Mount(CONTROL_DIR, str(self.stage / "control"), type="bind", read_only=True),
            ],
            pids_limit=ZYGOTE_PIDS,
            ulimits=[],
            seccomp_profile=seccomp.docker_profile(seccomp.SLOT_CONTAINER),
            cgroup_parent=self._cgroup_parent(),
        )
        host_config["MaskedPaths"] = SLOT_MASKED_PATHS
        host_config["ReadonlyPaths"] = []  # all of the engine's are under /proc
        container = self.api.create_container(
            self.settings.image,
            command=[PYTHON, "-I", pool.ZYGOTE_PATH, json.dumps(config)],
            entrypoint=[],
            user=f"{self.uid}:{self.uid}",
            hostname="sandbox",
            working_dir=SCRATCH_DIR,
            environment=ENVIRONMENT,  # as bwrap gives its zygote (one OpenMP thread)
            network_disabled=True,
            labels={LABEL: "pool", PID_LABEL: str(os.getpid())},
            name=self.name,
            host_config=host_config,
            use_config_proxy=False,
        )
        self.container_id = str(container["Id"])

    def _cgroup_parent(self) -> str | None:
        """Beside the server's own CPU group, as a bwrap slot's groups are; None: the engine's.

        Under the engine's /docker every slot would share that one group's CPU weight (with
        every other container too): on the loaded machine a pool of two slots got half the
        gradings per second of a bwrap pool of two, for the same CPU per grading.
        """
        if self.api.info().get("CgroupDriver") != "cgroupfs":
            return None  # systemd's driver takes a slice name: the engine's default stands
        return own_path("cpu")

    def _accept(self) -> None:
        """Wait for the zygote to connect to its control socket; check that it is the slot's."""
        assert self.listener is not None
        deadline = time.monotonic() + SLOT_CONNECT_TIMEOUT_SECONDS
        while not readable(self.listener.fileno(), 0.05):
            if readable(self.zygote_pidfd, 0) or time.monotonic() > deadline:
                raise SandboxError("the zygote never reached its control socket (see the log)")
        self.control.close()
        self.control, _ = self.listener.accept()
        self.listener.close()
        self.listener = None
        assert self.stage is not None
        (self.stage / "control" / CONTROL_SOCKET).unlink()  # nothing else may connect
        peer = self.control.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        _, peer_uid, _ = struct.unpack("3i", peer)
        if peer_uid != self.uid:
            raise SandboxError(f"uid {peer_uid}, not the slot's, reached its control socket")

    def _log(self, output: Any) -> None:

        pending = b""
        with contextlib.suppress(Exception):  # the stream ends with the container
            for chunk in output:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    pool.log_zygote_line(self.index, line)
        if pending:
            pool.log_zygote_line(self.index, pending)

    def stop(self) -> None:
        self.control.close()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.container_id is not None:
            remove_container(self.api, self.container_id, self.name)
            self.container_id = None
        if self.zygote_pidfd >= 0:
            os.close(self.zygote_pidfd)
            self.zygote_pidfd = -1
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = None
        self.client.close()


def container_cgroups(pid: int, container_id: str) -> RunCgroups | None:
    """The cgroups (v1 memory, pids, cpuacct) of the container whose process `pid` is, as this
    host sees them; None where it cannot."""
    dirs: dict[str, Path] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in ("memory", "pids", "cpuacct"):
            if controller in controllers.split(",") and container_id in path:
                dirs[controller] = Path(
                    os.path.realpath(CGROUP_ROOT / controller / path.lstrip("/"))
                )
    if len(dirs) == 3 and all(path.is_dir() for path in dirs.values()):
        return RunCgroups(dirs)
    return None


def remove_container(api: Any, container_id: str, name: str) -> bool:
    """Kill and remove a container, and wait until it is gone; False if it is not."""
    import docker.errors
    import requests

    try:
        api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        return True  # removed by the engine already (auto_remove)
    except docker.errors.APIError as error:
        if "already in progress" not in str(error):
            log.error("sandbox container %s: removal failed: %s", name, error)
            return False
    except requests.RequestException as error:
        log.error("sandbox container %s: removal hung: %s", name, error)
        return False
    deadline = time.monotonic() + API_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            api.inspect_container(container_id)
        except docker.errors.NotFound:
            return True
        except Exception as error:  # the engine itself is in trouble
            log.error("sandbox container %s: cannot check removal: %s", name, error)
            return False
        time.sleep(0.02)
    log.error("sandbox container %s is still there after its removal", name)
    return False


def _report(data: bytes) -> dict[str, Any]:
    """The init's report, as data: a JSON object, or a SandboxError."""
    try:
        report = json.loads(data)
    except ValueError:
        report = None
    if not isinstance(report, dict):
        raise SandboxError("the container init sent a malformed report")
    return report


def _number(value: object) -> float:
    """A number from the init's report, or -1: the report is read as data, nothing more."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return -1.0


@dataclass(frozen=True)
class DockerRunner:
    settings: DockerSettings
    name: str = "docker"

    @property
    def status(self) -> str:
        return f"docker ({self.settings.image}), a cold container per run"

    def run(
        self,
        program: str,
        inputs: Mapping[str, bytes],
        limits: Limits,
        later_input: bytes | None = None,
    ) -> RunResult:
        check_request(program, inputs, limits)
        return run_program(self.settings, program, inputs, limits, later_input)

    def close(self) -> None:
        pass
