"""The bubblewrap backend: a fresh sandbox per run, supervised from outside it.

    result = run_program("/usr/bin/bwrap", source, {"cases.json": data}, Limits())

The supervisor (this module, inside the server) spawns sandbox/launcher.py, which execs bwrap.
bwrap's child builds the namespaces and the filesystem, then waits on a pipe before it execs the
program as PID 1 of the new PID namespace: "the init". Meanwhile the supervisor puts the init
into the run's cgroups, (when not root) sets its rlimits, and opens the scratch directory; only
then does it let the program start. From there it reads the three pipes, polls the limits and
watches the clock. Any limit ends the run by a SIGKILL of the init, which takes every process of
the namespace with it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import resource
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from sandbox import host_view, seccomp, uids
from sandbox.cgroups import RunCgroups
from sandbox.errors import SandboxError
from sandbox.limits import Limits
from sandbox.result import RunResult

log = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("launcher.py")
STAGE_DIR = uids.RUN_DIR / "stage"
SANDBOX_DIR = "/sandbox"
PROGRAM_PATH = "/sandbox/main.py"
SCRATCH_DIR = "/tmp"
ENVIRONMENT = {
    "PATH": "/usr/bin:/bin",
    "HOME": SCRATCH_DIR,
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# The fd numbers bwrap gets from the launcher; bwrap hands 3 on to the program.
PAYLOAD_FD, INFO_FD, BLOCK_FD, SECCOMP_FD, FIRST_FILE_FD = 3, 4, 5, 6, 7
INPUT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")

POLL_SECONDS = 0.02
SETUP_TIMEOUT_SECONDS = 10.0
TEARDOWN_TIMEOUT_SECONDS = 5.0
DRAIN_SECONDS = 1.0  # how long output may still arrive after the program ended
READ_BYTES = 65536
# Without a memory cgroup, RLIMIT_AS is the memory cap, and `import torch` alone maps ~700 MB.
TORCH_VIRTUAL_HEADROOM_BYTES = 1 << 30


def check_request(program: str, inputs: Mapping[str, bytes], limits: Limits) -> None:
    """Raise ValueError for a bad input name, a limit not > 0, or a file over file_size_bytes."""
    for field, value in vars(limits).items():
        if not value > 0:
            raise ValueError(f"Limits.{field} must be > 0, not {value!r}")
    for name in inputs:
        if not INPUT_NAME.fullmatch(name) or name == "main.py":
            raise ValueError(f"input name {name!r} is not a plain file name (or is main.py)")
    # bwrap copies the files in under the run's RLIMIT_FSIZE.
    sizes = {"main.py": len(program.encode()), **{name: len(data) for name, data in inputs.items()}}
    for name, size in sizes.items():
        if size > limits.file_size_bytes:
            raise ValueError(f"{name} ({size} bytes) is larger than Limits.file_size_bytes")


def run_program(bwrap: str, program: str, inputs: Mapping[str, bytes], limits: Limits) -> RunResult:
    """Run `program` at /sandbox/main.py with `inputs` beside it, under `limits`."""
    check_request(program, inputs, limits)
    run = _Run(bwrap, limits)
    try:
        run.start(program, inputs)
        run.supervise()
        run.final_checks()
    finally:
        clean = run.close()
    if not clean:
        raise SandboxError("a sandbox did not die within its teardown time; see the log")
    result = run.result()
    log.debug(
        "sandbox run: uid=%s exit=%s signal=%s limit=%s wall=%.2fs cpu=%.2fs",
        run.lease.uid if run.lease else os.geteuid(), result.exit_code, result.signal,
        result.limit_hit, result.wall_seconds, result.cpu_seconds,
    )  # fmt: skip
    return result


def _python_dirs() -> list[str]:
    """The interpreter's and the venv's directories outside /usr, none inside another."""
    dirs: list[str] = []
    for path in sorted({os.path.abspath(sys.base_prefix), os.path.abspath(sys.prefix)}):
        if not path.startswith("/usr/") and not any(path.startswith(d + "/") for d in dirs):
            dirs.append(path)
    return dirs


def _bwrap_args(limits: Limits, input_names: list[str], binds: list[tuple[str, str]]) -> list[str]:
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


def _rlimits(limits: Limits, has_cgroups: bool, root: bool) -> dict[int, tuple[int, int]]:
    cpu_seconds = math.ceil(limits.cpu_seconds)
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

    def __init__(self, bwrap: str, limits: Limits) -> None:
        self.bwrap = bwrap
        self.limits = limits
        self.root = os.geteuid() == 0
        self.lease: uids.UidLease | None = None
        self.cgroups: RunCgroups | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.fds: list[int] = []  # every fd this run opened and has not closed yet
        self.proc_pidfd = self.init_pidfd = self.scratch_fd = -1
        self.payload_r = self.out_r = self.err_r = self.block_w = -1
        self.init_pid = 0
        self.selector = selectors.DefaultSelector()
        self.started = self.ended = time.monotonic()
        self.killed_at: float | None = None
        self.wait_status: int | None = None
        self.rusage: resource.struct_rusage | None = None
        self.flags = dict.fromkeys(
            ("timed_out", "cpu_time_exceeded", "memory_exceeded", "process_limit_exceeded",
             "file_size_exceeded", "open_files_exceeded", "output_truncated", "payload_truncated"),
            False,
        )  # fmt: skip
        self.payload, self.stdout, self.stderr = bytearray(), bytearray(), bytearray()
        self.cpu_seconds = 0.0
        self.peak_memory_bytes: int | None = None

    def _fd(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def _close(self, fd: int) -> None:
        if fd in self.fds:
            self.fds.remove(fd)
            if fd in self.selector.get_map():
                self.selector.unregister(fd)
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
            self.cgroups = RunCgroups.create(
                f"loopgrade-{uid}", self.limits, pids_max=self.limits.max_processes
            )
            STAGE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        files = []  # the seccomp program, then the files at FIRST_FILE_FD on
        for data in [seccomp.run_filter().bpf, program.encode(), *inputs.values()]:
            fd = self._fd(os.memfd_create("sandbox-file"))
            unwritten = memoryview(data)
            while unwritten:
                unwritten = unwritten[os.write(fd, unwritten) :]
            os.lseek(fd, 0, os.SEEK_SET)
            files.append(fd)
        self.payload_r, payload_w = self._pipe()
        self.out_r, out_w = self._pipe()
        self.err_r, err_w = self._pipe()
        info_r, info_w = self._pipe()
        block_r, self.block_w = self._pipe()
        python_dirs = _python_dirs()
        if self.root:  # bwrap (as the run's uid) reaches them through the launcher's staging
            binds = [(f"{STAGE_DIR}/{i}", path) for i, path in enumerate(python_dirs)]
        else:
            binds = [(path, path) for path in python_dirs]
        rlimits = _rlimits(self.limits, self.cgroups is not None, self.root)
        moves = [[payload_w, PAYLOAD_FD], [info_w, INFO_FD], [block_r, BLOCK_FD]]
        moves += [[fd, number] for number, fd in enumerate(files, start=SECCOMP_FD)]
        config = {
            "bwrap": self.bwrap,
            "args": _bwrap_args(self.limits, list(inputs), binds),
            "fds": moves,
            "uid": uid,
            # As root, the launcher sets them before it drops to the run's uid: the server may
            # lack CAP_SYS_RESOURCE (as in a container) and then cannot prlimit() another uid.
            "rlimits": [[limit, *value] for limit, value in rlimits.items()] if self.root else [],
            "stage_dir": str(STAGE_DIR),
            "stage_sources": python_dirs if self.root else [],
        }
        self.started = time.monotonic()  # the wall clock starts here, not while waiting for a uid
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(config)],
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            pass_fds=[fd for fd, _ in moves],
            start_new_session=True,
            env={"LANG": "C.UTF-8"},  # nothing of the server's environment, not even to bwrap
        )
        for fd in [payload_w, out_w, err_w, info_w, block_r, *files]:
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
            # On the init, inside the new user namespace: set before, RLIMIT_NPROC would also
            # count every other process of the user running the server.
            for limit, value in rlimits.items():
                resource.prlimit(self.init_pid, limit, value)
        os.write(self.block_w, b"go")
        self._close(self.block_w)

    def _read_init_pid(self, info_r: int) -> int:
        """The host pid of the sandbox's init, from bwrap's --info-fd JSON."""
        deadline = time.monotonic() + SETUP_TIMEOUT_SECONDS
        info = b""
        while time.monotonic() < deadline:
            if _readable(info_r, deadline - time.monotonic()):
                chunk = os.read(info_r, 4096)
                if not chunk:
                    break
                info += chunk
        self._close(info_r)
        try:
            return int(json.loads(info)["child-pid"])
        except (ValueError, KeyError):
            raise self._setup_failure("bubblewrap did not start") from None

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
            if _readable(self.init_pidfd, 0) or time.monotonic() > deadline:
                raise self._setup_failure("bubblewrap could not set up the sandbox")
            time.sleep(0.001)

    def _setup_failure(self, what: str) -> SandboxError:
        _readable(self.proc_pidfd, 1.0)  # its stderr is complete once it has exited
        message = os.read(self.err_r, 8192) if _readable(self.err_r, 0) else b""
        return SandboxError(f"{what}: {message.decode(errors='replace').strip() or 'no message'}")

    # -- supervise -------------------------------------------------------------------------------

    def supervise(self) -> None:
        """Read the pipes and poll the limits until the program has ended and its output drained."""
        for fd in (self.payload_r, self.out_r, self.err_r, self.proc_pidfd):
            self.selector.register(fd, selectors.EVENT_READ)
        wall_deadline = self.started + self.limits.wall_timeout_seconds
        next_poll = time.monotonic()
        exited_at: float | None = None
        while True:
            now = time.monotonic()
            if exited_at is None:
                if self.killed_at is None and now >= wall_deadline:
                    self._end("timed_out")
                if self.killed_at is not None and now > self.killed_at + TEARDOWN_TIMEOUT_SECONDS:
                    raise SandboxError("the sandbox did not die after SIGKILL")
                if self.killed_at is None and now >= next_poll:
                    self._poll_limits()
                    next_poll = now + POLL_SECONDS
            else:
                pipes_open = len(self.selector.get_map()) > 0
                if not pipes_open or now > exited_at + DRAIN_SECONDS:
                    return
            if exited_at is not None:
                wake = exited_at + DRAIN_SECONDS
            elif self.killed_at is not None:
                wake = self.killed_at + TEARDOWN_TIMEOUT_SECONDS
            else:
                wake = min(wall_deadline, next_poll)
            for key, _ in self.selector.select(max(0.0, wake - time.monotonic())):
                if key.fd not in self.selector.get_map():
                    continue  # closed by an earlier event of this batch; the number may be reused
                if key.fd == self.proc_pidfd:
                    exited_at = time.monotonic()
                    self._reap()
                    self._kill_tree()  # whatever the program left running dies with it
                else:
                    self._read(key.fd)

    def _read(self, fd: int) -> None:
        data = os.read(fd, READ_BYTES)
        if not data:
            self._close(fd)
        elif fd == self.payload_r:
            room = self.limits.payload_bytes - len(self.payload)
            self.payload += data[:room]
            if len(data) > room:
                self._close(self.payload_r)  # the writer gets EPIPE
                self._end("payload_truncated")
        else:
            room = self.limits.output_bytes - len(self.stdout) - len(self.stderr)
            (self.stdout if fd == self.out_r else self.stderr).extend(data[:room])
            if len(data) > room:
                self._close(self.out_r)
                self._close(self.err_r)
                self._end("output_truncated")

    def _poll_limits(self) -> None:
        """Set the flag of every limit the running tree has hit, and end the run if any."""
        limits, hit = self.limits, []
        if self.cgroups:
            pids = self.cgroups.pids()
            if self.cgroups.oom_kills():
                hit.append("memory_exceeded")
            if self.cgroups.process_limit_hits():
                hit.append("process_limit_exceeded")
            if self.cgroups.cpu_seconds() >= limits.cpu_seconds:
                hit.append("cpu_time_exceeded")
        else:
            pids = set(host_view.process_tree(self.init_pid))
            stats = [host_view.process_stat(pid) for pid in pids]
            if sum(rss for _, rss, _ in stats) >= limits.memory_bytes:
                hit.append("memory_exceeded")
            if sum(tasks for _, _, tasks in stats) >= limits.max_processes:
                hit.append("process_limit_exceeded")
            if sum(cpu for cpu, _, _ in stats) >= limits.cpu_seconds:
                hit.append("cpu_time_exceeded")
        if any(host_view.open_fd_count(pid) >= limits.open_files for pid in pids):
            hit.append("open_files_exceeded")
        if host_view.file_size_cap_reached(self.scratch_fd, limits.file_size_bytes):
            hit.append("file_size_exceeded")
        for flag in hit:
            self._end(flag)

    def final_checks(self) -> None:
        """After the end: the limits whose traces outlive the processes, and the usage figures."""
        assert self.rusage is not None
        if self.cgroups:
            self.flags["memory_exceeded"] |= self.cgroups.oom_kills() > 0
            self.flags["process_limit_exceeded"] |= self.cgroups.process_limit_hits() > 0
            self.cpu_seconds = self.cgroups.cpu_seconds()
            self.peak_memory_bytes = self.cgroups.peak_memory_bytes()
        else:
            self.cpu_seconds = self.rusage.ru_utime + self.rusage.ru_stime
            self.peak_memory_bytes = self.rusage.ru_maxrss * 1024 or None
            peak = self.peak_memory_bytes or 0
            self.flags["memory_exceeded"] |= peak >= self.limits.memory_bytes
        self.flags["cpu_time_exceeded"] |= self.cpu_seconds >= self.limits.cpu_seconds
        self.flags["file_size_exceeded"] |= host_view.file_size_cap_reached(
            self.scratch_fd, self.limits.file_size_bytes
        )

    # -- end -------------------------------------------------------------------------------------

    def _end(self, flag: str) -> None:
        """A limit was hit: record it and kill the whole tree."""
        self.flags[flag] = True
        if self.killed_at is None:
            self.killed_at = time.monotonic()
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
        self.ended = time.monotonic()
        # Tell Popen, so it never waits for this pid again (it may belong to another run by then).
        self.proc.returncode = os.waitstatus_to_exitcode(self.wait_status)
        self._close(self.proc_pidfd)
        self.proc_pidfd = -1

    def close(self) -> bool:
        """Kill and reap everything, remove the cgroups, free the uid; False if something lives."""
        clean = True
        self._kill_tree()
        if self.init_pidfd >= 0 and not _readable(self.init_pidfd, TEARDOWN_TIMEOUT_SECONDS):
            clean = False  # the namespace is empty once its init has exited
        if self.proc is not None and self.wait_status is None:
            if self.proc_pidfd < 0:  # start() failed right after spawning
                self.proc_pidfd = self._fd(os.pidfd_open(self.proc.pid))
            if not _readable(self.proc_pidfd, TEARDOWN_TIMEOUT_SECONDS):
                _kill(self.proc_pidfd)
            if _readable(self.proc_pidfd, TEARDOWN_TIMEOUT_SECONDS):
                self._reap()
            else:
                clean = False
        if self.cgroups:
            clean = self.cgroups.remove(TEARDOWN_TIMEOUT_SECONDS) and clean
        for fd in list(self.fds):
            self._close(fd)
        self.selector.close()
        if self.lease and clean:
            self.lease.release()
        # Otherwise the uid stays locked for this process's life: no new run may share it with
        # whatever is left.
        return clean

    def result(self) -> RunResult:
        assert self.wait_status is not None
        exit_code: int | None = None
        signal_number: int | None = None
        if os.WIFSIGNALED(self.wait_status):
            signal_number = os.WTERMSIG(self.wait_status)
        else:
            # bwrap reports the program's death by signal N as exit status 128 + N.
            status = os.WEXITSTATUS(self.wait_status)
            exit_code, signal_number = (None, status - 128) if status > 128 else (status, None)
        flags = self.flags
        return RunResult(
            exit_code=exit_code,
            signal=signal_number,
            timed_out=flags["timed_out"],
            cpu_time_exceeded=flags["cpu_time_exceeded"],
            memory_exceeded=flags["memory_exceeded"],
            process_limit_exceeded=flags["process_limit_exceeded"],
            file_size_exceeded=flags["file_size_exceeded"],
            open_files_exceeded=flags["open_files_exceeded"],
            output_truncated=flags["output_truncated"],
            payload_truncated=flags["payload_truncated"],
            wall_seconds=self.ended - self.started,
            cpu_seconds=self.cpu_seconds,
            peak_memory_bytes=self.peak_memory_bytes,
            payload=bytes(self.payload),
            stdout=bytes(self.stdout),
            stderr=bytes(self.stderr),
        )


def _kill(pidfd: int) -> None:
    if pidfd >= 0:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)


def _readable(fd: int, timeout_seconds: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(max(0.0, timeout_seconds)))
