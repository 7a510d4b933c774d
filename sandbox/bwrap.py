"""The bubblewrap backend: a fresh sandbox per run, supervised from outside it.

One idea over 400 lines: a cold bubblewrap run, from the launcher to its result.

    result = run_program("/usr/bin/bwrap", source, {"cases.json": data}, Limits())

This module (inside the server) spawns sandbox/launcher.py, which execs bwrap. bwrap's child
builds the namespaces and the filesystem, then waits on a pipe before it execs the program as
PID 1 of the new PID namespace ("the init"), under the seccomp filter (sandbox/seccomp.py).
Meanwhile this module puts the init into the run's cgroups, (when not root) sets its rlimits,
and opens the scratch directory; only then does it let the program start. From there the shared
supervisor (sandbox/supervise.py) holds the run to its limits, through what this module gives
it: the program's four pipes and bwrap's pidfd, the usage the cgroups (or /proc) show, and the
kill, a SIGKILL of the init, which takes every process of the namespace with it. The run ends
when the init does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sandbox import host_view, seccomp, uids
from sandbox.cgroups import RunCgroups, group_name, warn_unavailable
from sandbox.errors import SandboxError
from sandbox.limits import Limits
from sandbox.pipes import memfd, read_pipe, readable, write_input
from sandbox.result import RunResult
from sandbox.supervise import (
    ENVIRONMENT,
    PAYLOAD_FD,
    PROGRAM_PATH,
    REQUEST_FD,
    SANDBOX_DIR,
    SCRATCH_DIR,
    START_FD,
    TEARDOWN_TIMEOUT_SECONDS,
    Channel,
    Supervisor,
    Usage,
    check_request,
)

log = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("launcher.py")
STAGE_DIR = uids.RUN_DIR / "stage"
# The fd numbers bwrap gets from the launcher; bwrap hands 0, 3, 4 and 5 on to the program.
INFO_FD, BLOCK_FD, SECCOMP_FD, FIRST_FILE_FD = 6, 7, 8, 9

# Only a bound on a setup that hangs: a busy machine takes longer (an emulated one running
# the cgroup v2 tests beside CI's other pass once took more than 10 s to start bubblewrap).
SETUP_TIMEOUT_SECONDS = 30.0
# Without a memory cgroup, RLIMIT_AS is the memory cap, and `import torch` alone maps ~700 MB.
TORCH_VIRTUAL_HEADROOM_BYTES = 1 << 30


def run_program(
    bwrap: str,
    program: str,
    inputs: Mapping[str, bytes],
    limits: Limits,
    later_input: bytes | None = None,
) -> RunResult:
    """Run `program` at /sandbox/main.py with `inputs` beside it, under `limits` (and
    `later_input` on request: sandbox/supervise.py)."""
    check_request(program, inputs, limits)
    run = _Run(bwrap, limits, later_input)
    try:
        run.start(program, inputs)
        run.supervisor.watch(run)
        run.supervisor.finish(run.final_usage())
    finally:
        clean = run.close()
    if not clean:
        raise SandboxError("a sandbox did not die within its teardown time; see the log")
    result = run.result()
    log.debug(
        "sandbox run: uid=%s exit=%s signal=%s limit=%s wall=%.2fs cpu=%.2fs startup_cpu=%s",
        run.lease.uid if run.lease else os.geteuid(), result.exit_code, result.signal,
        result.limit_hit, result.wall_seconds, result.cpu_seconds, result.startup_cpu_seconds,
    )  # fmt: skip
    return result


def python_dirs() -> list[str]:
    """The interpreter's and the venv's directories outside /usr, none inside another."""
    dirs: list[str] = []
    for path in sorted({os.path.abspath(sys.base_prefix), os.path.abspath(sys.prefix)}):
        if not path.startswith("/usr/") and not any(path.startswith(d + "/") for d in dirs):
            dirs.append(path)
    return dirs


def python_binds(root: bool) -> list[tuple[str, str]]:
    """The interpreter's directories, as (source, destination) binds of a sandbox.

    As root, bwrap runs as the sandbox's uid and reaches them through the launcher's staging.
    """
    if root:
        return [(f"{STAGE_DIR}/{i}", path) for i, path in enumerate(python_dirs())]
    return [(path, path) for path in python_dirs()]


def launcher_config(
    binary: str,
    args: list[str],
    moves: list[list[int]],
    uid: int | None,
    rlimits: dict[int, tuple[int, int]],
) -> dict[str, object]:
    """What sandbox/launcher.py is given to start bwrap with `args`, as `uid` (None: as itself).

    As root, the launcher stages the interpreter and sets the rlimits before it drops to `uid`:
    the server may lack CAP_SYS_RESOURCE (as in a container) and then cannot prlimit() another
    uid. Otherwise the caller sets them on the sandbox's first process (set_rlimits_inside).
    """
    as_root = uid is not None
    if as_root:
        STAGE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    return {
        "bwrap": binary, "args": args, "fds": moves, "uid": uid,
        "rlimits": [[limit, *value] for limit, value in rlimits.items()] if as_root else [],
        "stage_dir": str(STAGE_DIR), "stage_sources": python_dirs() if as_root else [],
    }  # fmt: skip


def set_rlimits_inside(pid: int, rlimits: dict[int, tuple[int, int]]) -> None:
    """Set the rlimits of `pid`, the first process of a sandbox started by a server that is not
    root: inside its new user namespace. Set before, RLIMIT_NPROC would also count every other
    process of the user running the server."""
    for limit, value in rlimits.items():
        resource.prlimit(pid, limit, value)


def bwrap_args(limits: Limits, input_names: list[str], binds: list[tuple[str, str]]) -> list[str]:
    args = [
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--disable-userns", "--die-with-parent", "--new-session",
        # The program is PID 1 of its namespace, so bwrap (which we reap) reaps it. With bwrap's
        # own init instead, that init outlives bwrap and is reaped by whatever the host's PID 1 is.
        "--as-pid-1",
        "--cap-drop", "ALL", "--hostname", "sandbox", "--clearenv",
    ]  # fmt: skip
    for name, value in ENVIRONMENT.items():
        args += ["--setenv", name, value]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    # Scratch before the interpreter's binds: a venv that lives under /tmp (a CI checkout, say)
    # is then bound on top of the scratch tmpfs instead of being hidden under it.
    args += ["--size", str(limits.scratch_bytes), "--tmpfs", SCRATCH_DIR]
    for source, destination in binds:
        args += ["--ro-bind", source, destination]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for fd, name in enumerate(["main.py", *input_names], start=FIRST_FILE_FD):
        args += ["--perms", "0444", "--ro-bind-data", str(fd), f"{SANDBOX_DIR}/{name}"]
    # The root and /dev (with /dev/shm) are tmpfs made by bwrap: without this they are writable.
    args += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", SCRATCH_DIR]
    args += ["--info-fd", str(INFO_FD), "--block-fd", str(BLOCK_FD)]
    # bwrap installs it last, just before it execs the program: nothing of bwrap runs under it.
    args += ["--seccomp", str(SECCOMP_FD)]
    return [*args, "--", sys.executable, "-I", PROGRAM_PATH]


def run_rlimits(limits: Limits, has_cgroups: bool, root: bool) -> dict[int, tuple[int, int]]:
    # A backstop per process: the supervisor holds the run's CPU, set-up apart, to its caps.
    cpu_seconds = math.ceil(limits.startup_cpu_seconds + limits.cpu_seconds)
    # As root, RLIMIT_NPROC also counts bwrap itself (running as the run's uid). With a pids
    # cgroup, one more, so that the cgroup (which records that it refused a fork) refuses first.
    processes = limits.max_processes + int(root) + int(has_cgroups)
    rlimits = {
        # SIGXCPU at the soft limit, SIGKILL at the hard one: as PID 1 the program ignores SIGXCPU.
        resource.RLIMIT_CPU: (cpu_seconds, cpu_seconds + 1),
        resource.RLIMIT_FSIZE: (limits.file_size_bytes, limits.file_size_bytes),
        resource.RLIMIT_NOFILE: (limits.open_files, limits.open_files),
        resource.RLIMIT_NPROC: (processes, processes),
        resource.RLIMIT_CORE: (0, 0),
    }
    if not has_cgroups:
        virtual = limits.memory_bytes + TORCH_VIRTUAL_HEADROOM_BYTES
        rlimits[resource.RLIMIT_AS] = (virtual, virtual)
    return rlimits


class _Run:
    """One run, from spawning bwrap to the last process reaped."""

    def __init__(self, bwrap: str, limits: Limits, later_input: bytes | None) -> None:
        self.bwrap = bwrap
        self.limits = limits
        self.supervisor = Supervisor(limits, later_input)
        self.root = os.geteuid() == 0
        self.lease: uids.UidLease | None = None
        self.cgroups: RunCgroups | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.fds: list[int] = []  # every fd this run opened and has not closed yet
        self.proc_pidfd = self.init_pidfd = self.scratch_fd = -1
        self.err_r = self.block_w = self.stdin_w = -1
        self.reading: dict[int, Channel] = {}  # the program's pipes still open, by read end
        self.start_report = bytearray()
        self.init_pid = 0
        self.wait_status: int | None = None
        self.rusage: resource.struct_rusage | None = None

    def _fd(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def _close(self, fd: int) -> None:
        if fd in self.fds:
            self.fds.remove(fd)
            self.reading.pop(fd, None)
            os.close(fd)

    def _pipe(self) -> tuple[int, int]:
        read_end, write_end = os.pipe()
        return self._fd(read_end), self._fd(write_end)

    # -- start -----------------------------------------------------------------------------------

    def start(self, program: str, inputs: Mapping[str, bytes]) -> None:
        uid = None
        if self.root:
            self.lease = uids.lease_uid(uids.uid_range())
            uid = self.lease.uid
        try:
            self.cgroups = RunCgroups.create(
                group_name("loopgrade", uid), self.limits, pids_max=self.limits.max_processes
            )
        except OSError as error:  # not root, and no group delegated to this user; or none here
            warn_unavailable(str(error))
        files = []  # the seccomp program, then the files at FIRST_FILE_FD on
        for data in [seccomp.run_filter().bpf, program.encode(), *inputs.values()]:
            files.append(self._fd(memfd(data)))
        payload_r, payload_w = self._pipe()
        start_r, start_w = self._pipe()
        out_r, out_w = self._pipe()
        self.err_r, err_w = self._pipe()
        request_r, request_w = self._pipe()
        stdin_r, self.stdin_w = self._pipe()
        self.reading = {
            payload_r: Channel.PAYLOAD, start_r: Channel.STARTED,
            out_r: Channel.STDOUT, self.err_r: Channel.STDERR, request_r: Channel.REQUESTED,
        }  # fmt: skip
        if self.supervisor.later_input is None:
            self.give(b"")
        info_r, info_w = self._pipe()
        block_r, self.block_w = self._pipe()
        rlimits = run_rlimits(self.limits, self.cgroups is not None, self.root)
        moves = [[payload_w, PAYLOAD_FD], [start_w, START_FD], [request_w, REQUEST_FD]]
        moves += [[info_w, INFO_FD]]
        moves += [[block_r, BLOCK_FD]]
        moves += [[fd, number] for number, fd in enumerate(files, start=SECCOMP_FD)]
        args = bwrap_args(self.limits, list(inputs), python_binds(self.root))
        config = launcher_config(self.bwrap, args, moves, uid, rlimits)
        self.supervisor.start_clock()  # here, not while waiting for a uid
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(config)],
            stdin=stdin_r,
            stdout=out_w,
            stderr=err_w,
            pass_fds=[fd for fd, _ in moves],
            start_new_session=True,
            env={"LANG": "C.UTF-8"},  # nothing of the server's environment, not even to bwrap
        )
        for fd in [payload_w, start_w, out_w, err_w, request_w, stdin_r, info_w, block_r, *files]:
            self._close(fd)
        self.proc_pidfd = self._fd(os.pidfd_open(self.proc.pid))
        self.init_pid = self._read_init_pid(info_r)
        self.init_pidfd = self._fd(os.pidfd_open(self.init_pid))
        if host_view.parent_pid(self.init_pid) != self.proc.pid:  # it died and its pid was reused
            raise self._setup_failure("the sandbox's init died during setup")
        self._wait_for_setup()
        # Held to the end: the scratch tmpfs outlives the sandbox, to be checked for file sizes.
        self.scratch_fd = self._fd(
            os.open(f"/proc/{self.init_pid}/root{SCRATCH_DIR}", os.O_RDONLY | os.O_DIRECTORY)
        )
        if self.cgroups:
            self.cgroups.attach(self.init_pid)
        if not self.root:
            set_rlimits_inside(self.init_pid, rlimits)
        os.write(self.block_w, b"go")
        self._close(self.block_w)

    def _read_init_pid(self, info_r: int) -> int:
        """The host pid of the sandbox's init."""
        try:
            return read_child_pid(info_r, SETUP_TIMEOUT_SECONDS)
        except SandboxError as error:
            raise self._setup_failure(str(error)) from None
        finally:
            self._close(info_r)

    def _wait_for_setup(self) -> None:
        """Wait until the init has pivoted into the new root (it then blocks before the exec)."""
        root = f"/proc/{self.init_pid}/root"
        host_root = os.stat("/")
        deadline = time.monotonic() + SETUP_TIMEOUT_SECONDS
        while True:
            try:
                new_root = os.stat(root)
                pivoted = (new_root.st_dev, new_root.st_ino) != (host_root.st_dev, host_root.st_ino)
                if pivoted and os.path.exists(root + PROGRAM_PATH):
                    return
            except OSError:
                pass
            if readable(self.init_pidfd, 0) or time.monotonic() > deadline:
                raise self._setup_failure("bubblewrap could not set up the sandbox")
            time.sleep(0.001)

    def _setup_failure(self, what: str) -> SandboxError:
        readable(self.proc_pidfd, 1.0)  # its stderr is complete once it has exited
        message = os.read(self.err_r, 8192) if readable(self.err_r, 0) else b""
        return SandboxError(f"{what}: {message.decode(errors='replace').strip() or 'no message'}")

    # -- what the supervisor sees (sandbox.supervise.Process) -----------------------------------

    def wait_fds(self) -> list[int]:
        return [*self.reading, *([self.proc_pidfd] if self.proc_pidfd >= 0 else [])]

    def read(self, fd: int) -> list[tuple[Channel, bytes]]:
        if fd == self.proc_pidfd:
            self._reap()
            self.kill()  # whatever the program left running dies with it
            return [(Channel.EXITED, b"")]
        events, ended = read_pipe(fd, self.reading[fd], self.start_report)
        if ended:
            self._close(fd)
        return events

    def usage(self) -> Usage:
        cap = self.limits.file_size_bytes
        if self.cgroups:
            pids = self.cgroups.pids()
            usage = Usage(
                cpu_seconds=self.cgroups.cpu_seconds(),
                oom_kills=self.cgroups.oom_kills(),
                process_limit_hits=self.cgroups.process_limit_hits(),
            )
        else:
            pids = set(host_view.process_tree(self.init_pid))
            stats = [host_view.process_stat(pid) for pid in pids]
            usage = Usage(
                cpu_seconds=sum(cpu for cpu, _, _ in stats),
                memory_bytes=sum(rss for _, rss, _ in stats),
                processes=sum(tasks for _, _, tasks in stats),
            )
        return dataclasses.replace(
            usage,
            most_open_files=max((host_view.open_fd_count(pid) for pid in pids), default=0),
            file_size_cap_reached=host_view.file_size_cap_reached(self.scratch_fd, cap),
            task_wait_seconds=host_view.task_wait_seconds(pids),
        )

    def final_usage(self) -> Usage:
        """After the end: what the cgroups, or the rusage of everything reaped, recorded."""
        assert self.rusage is not None
        file_size_cap_reached = host_view.file_size_cap_reached(
            self.scratch_fd, self.limits.file_size_bytes
        )
        if self.cgroups:
            return Usage(
                cpu_seconds=self.cgroups.cpu_seconds(),
                peak_memory_bytes=self.cgroups.peak_memory_bytes(),
                oom_kills=self.cgroups.oom_kills(),
                process_limit_hits=self.cgroups.process_limit_hits(),
                file_size_cap_reached=file_size_cap_reached,
            )
        peak = self.rusage.ru_maxrss * 1024 or None
        return Usage(
            cpu_seconds=self.rusage.ru_utime + self.rusage.ru_stime,
            memory_bytes=peak,  # no memory cgroup: the largest process is the measure
            peak_memory_bytes=peak,
            file_size_cap_reached=file_size_cap_reached,
        )

    def give(self, data: bytes) -> None:
        if self.stdin_w >= 0:
            write_input(self.stdin_w, data)
            self._close(self.stdin_w)
            self.stdin_w = -1

    # -- end -------------------------------------------------------------------------------------

    def kill(self) -> None:
        self._kill_tree()

    def _kill_tree(self) -> None:
        # The init is PID 1 of the namespace: its death takes every process in it. bwrap itself
        # is left to reap it and exit; killed first, it would orphan the init.
        _kill(self.init_pidfd)
        if self.cgroups:
            self.cgroups.kill_all()

    def _reap(self) -> None:
        assert self.proc is not None
        _, self.wait_status, self.rusage = os.wait4(self.proc.pid, 0)
        # Tell Popen, so it never waits for this pid again (it may belong to another run by then).
        self.proc.returncode = os.waitstatus_to_exitcode(self.wait_status)
        self._close(self.proc_pidfd)
        self.proc_pidfd = -1

    def close(self) -> bool:
        """Kill and reap everything, remove the cgroups, free the uid; False if something lives."""
        clean = True
        self._kill_tree()
        if self.init_pidfd >= 0 and not readable(self.init_pidfd, TEARDOWN_TIMEOUT_SECONDS):
            clean = False  # the namespace is empty once its init has exited
        if self.proc is not None and self.wait_status is None:
            if self.proc_pidfd < 0:  # start() failed right after spawning
                self.proc_pidfd = self._fd(os.pidfd_open(self.proc.pid))
            if not readable(self.proc_pidfd, TEARDOWN_TIMEOUT_SECONDS):
                _kill(self.proc_pidfd)
            if readable(self.proc_pidfd, TEARDOWN_TIMEOUT_SECONDS):
                self._reap()
            else:
                clean = False
        if self.cgroups:
            clean = self.cgroups.remove(TEARDOWN_TIMEOUT_SECONDS) and clean
        for fd in list(self.fds):
            self._close(fd)
        if self.lease and clean:
            self.lease.release()
        # Otherwise the uid stays locked for this process's life: no new run may share it with
        # whatever is left.
        return clean

    def result(self) -> RunResult:
        assert self.wait_status is not None
        if os.WIFSIGNALED(self.wait_status):
            return self.supervisor.result(None, os.WTERMSIG(self.wait_status))
        # bwrap reports the program's death by signal N as exit status 128 + N.
        status = os.WEXITSTATUS(self.wait_status)
        return self.supervisor.result(*((None, status - 128) if status > 128 else (status, None)))


def _kill(pidfd: int) -> None:
    if pidfd >= 0:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)


def read_child_pid(info_r: int, timeout_seconds: float) -> int:
    """The host pid of the process bubblewrap started, from its --info-fd JSON (bubblewrap
    closes the fd once it has written it); SandboxError if none came within the time."""
    deadline = time.monotonic() + timeout_seconds
    info = b""
    ended = False
    while not ended and readable(info_r, deadline - time.monotonic()):
        chunk = os.read(info_r, 4096)
        info += chunk
        ended = not chunk
    try:
        return int(json.loads(info)["child-pid"])
    except (ValueError, KeyError):
        why = "it ended first" if ended else f"no pid within {timeout_seconds:.0f} s"
        raise SandboxError(f"bubblewrap did not start ({why})") from None


@dataclass(frozen=True)
class BwrapRunner:
    binary: str
    name: str = "bwrap"

    @property
    def status(self) -> str:
        return f"bwrap ({self.binary}), a cold sandbox per run"

    def run(
        self,
        program: str,
        inputs: Mapping[str, bytes],
        limits: Limits,
        later_input: bytes | None = None,
    ) -> RunResult:
        return run_program(self.binary, program, inputs, limits, later_input)

    def close(self) -> None:
        pass
