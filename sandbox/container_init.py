"""PID 1 of a docker sandbox: starts the program and carries its four channels out on one stream.

    python3 -I -S /opt/loopgrade/init/init.py CONFIG_JSON      (the container's command)

A container has two output streams; a run has five: stdout, stderr, the result channel on fd 3,
the end of the program's set-up on fd 4 and its request for its later input on fd 5
(sandbox/supervise.py). This init starts the program with a pipe on each, under the run's
seccomp filter, and writes whatever arrives to its own stdout as frames: one byte naming the
channel (O, E, P; S once, when fd 4 is closed; R for a request), four bytes of length
(big-endian), the bytes. Before an R frame it forwards what the other pipes already hold, so
that the supervisor reads everything the program wrote before asking ahead of the request. The
program's stdin is the container's: the later input, when the run has one. The supervisor
(sandbox/docker.py) reads the frames through an attach socket and holds each channel to its
cap. When the program has exited, this init kills every process left in the container, forwards
what is still in the pipes, sends an X frame (JSON: the program's wait status, the CPU seconds
and peak RSS of everything reaped, the largest file in scratch) and then waits to be killed, so
that the supervisor can read the container's cgroups before they go.

The program cannot forge frames or stop this process: its fds 1 to 5 are pipes, this process
is not dumpable (so /proc/1/fd and ptrace are closed to the same uid), and as PID 1 of the
container's PID namespace it gets no signal from inside but SIGCHLD, which only wakes it.
A deadline (the run's wall limit and a margin) ends the container even if the supervisor died.

It runs as `python -I -S` in the image, so it uses only the standard library, and imports no
module of the project: it is copied into the container on its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import selectors
import signal
import struct
import sys
import time
from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_NO_NEW_PRIVS = 22, 2, 38
BPF_INSTRUCTION_BYTES = 8
READ_BYTES = 65536
START_REPORT_BYTES = 64
SCAN_ENTRIES, SCAN_DEPTH = 10_000, 16
SCRATCH_DIR = "/tmp"
DRAIN_SECONDS = 1.0  # as the supervisor's: a program writing without end cannot hold a request


def write_frame(channel: bytes, data: bytes) -> None:
    frame = memoryview(channel + struct.pack(">I", len(data)) + data)
    while frame:
        frame = frame[os.write(1, frame) :]


def largest_file_bytes(top: str) -> int:
    """The largest regular file under `top`, following no symlink, over a bounded walk."""
    budget = SCAN_ENTRIES

    def walk(path: str, depth: int) -> int:
        nonlocal budget
        largest = 0
        try:
            entries = list(os.scandir(path))
        except OSError:
            return 0
        for entry in entries:
            budget -= 1
            if budget < 0:
                break
            try:
                if entry.is_file(follow_symlinks=False):
                    largest = max(largest, entry.stat(follow_symlinks=False).st_size)
                elif entry.is_dir(follow_symlinks=False) and depth < SCAN_DEPTH:
                    largest = max(largest, walk(entry.path, depth + 1))
            except OSError:
                continue
        return largest

    return walk(top, 0)


class SockFprog(ctypes.Structure):
    """struct sock_fprog: a classic BPF program, as seccomp takes it."""

    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def load_seccomp(libc: ctypes.CDLL, program: bytes) -> None:
    """Install the compiled filter (sandbox/seccomp.py's, exported on the host) on this process.

    Filters stack: the engine's own profile stays in force, and this one refuses more.
    """
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // BPF_INSTRUCTION_BYTES, ctypes.addressof(buffer))
    ulong = ctypes.c_ulong
    if libc.prctl(PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def kill_all_others() -> None:
    """SIGKILL every process of the container but this init."""
    with contextlib.suppress(ProcessLookupError):  # none left
        os.kill(-1, signal.SIGKILL)


def start_program(config: dict[str, Any], pipes: dict[int, int], libc: ctypes.CDLL) -> int:
    """Fork and exec the program with `pipes` (its fd -> our write end) as fds 1 to 5, and this
    init's stdin as its own."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()  # its kill(0, ...) reaches only its own group, never this init
            for number, write_end in pipes.items():
                os.dup2(write_end, number)
            os.closerange(6, os.sysconf("SC_OPEN_MAX"))
            # Dumpable again (exec would do it anyway), or /proc/self is root's and closed to it.
            libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
            # The kernel's OOM killer picks the program (and its children), never this init.
            with open("/proc/self/oom_score_adj", "w") as adj:
                adj.write("1000")
            for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
                signal.signal(number, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            os.chdir(config["cwd"])
            with open(config["seccomp_path"], "rb") as bpf:
                load_seccomp(libc, bpf.read())
            os.execve(config["argv"][0], config["argv"], config["env"])
        except BaseException as error:  # nothing may run on in this copy of the init
            os.write(2, f"init: cannot start the program: {error}\n".encode())
            os._exit(127)
    os.close(0)  # the program's alone
    return pid


def forward(
    fd: int, channels: dict[int, bytes], selector: selectors.BaseSelector, start_report: bytearray
) -> None:
    """Read one of the program's pipes and frame what it brought; drop the pipe at its end."""
    data = os.read(fd, READ_BYTES)
    channel = channels[fd]
    if channel == b"R":  # a request: what the program wrote before it goes first
        if data:
            forward_what_is_there(channels, selector, start_report)
            write_frame(b"R", b"")
    elif channel == b"S":  # the end of the program's set-up: one frame, at fd 4's close
        start_report += data[: START_REPORT_BYTES - len(start_report)]
        if not data:
            write_frame(b"S", bytes(start_report))
    elif data:
        write_frame(channel, data)
    if not data:
        selector.unregister(fd)
        os.close(fd)
        del channels[fd]


def forward_what_is_there(
    channels: dict[int, bytes], selector: selectors.BaseSelector, start_report: bytearray
) -> None:
    """Forward what the output pipes hold now, for at most DRAIN_SECONDS."""
    deadline = time.monotonic() + DRAIN_SECONDS
    while time.monotonic() < deadline:
        ready = [int(key.fd) for key, _ in selector.select(0)]
        outputs = [fd for fd in ready if channels.get(fd, b"R") != b"R"]
        if not outputs:
            return
        for fd in outputs:
            if fd in channels:
                forward(fd, channels, selector, start_report)


def main(argv: list[str]) -> None:
    config: dict[str, Any] = json.loads(argv[1])
    deadline = time.monotonic() + float(config["deadline_seconds"])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
    # Python's own SIGINT handler would let the program interrupt this init from inside.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)

    channels: dict[int, bytes] = {}
    pipes: dict[int, int] = {}
    for number, channel in ((1, b"O"), (2, b"E"), (3, b"P"), (4, b"S"), (5, b"R")):
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        channels[read_end] = channel
        pipes[number] = write_end
    pid = start_program(config, pipes, libc)
    for write_end in pipes.values():
        os.close(write_end)

    selector = selectors.DefaultSelector()
    for read_end in channels:
        selector.register(read_end, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    status: int | None = None
    start_report = bytearray()
    while channels or status is None:
        timeout = max(0.0, deadline - time.monotonic())
        if timeout == 0.0 and status is None:
            status = -1  # the deadline: end it all, as the supervisor would have
            kill_all_others()
        for key, _ in selector.select(timeout if status is None else 1.0):
            fd = int(key.fd)
            if fd == wake_r:
                while True:
                    try:
                        if not os.read(wake_r, 4096):
                            break
                    except BlockingIOError:
                        break
                continue
            if fd in channels:  # not closed by an earlier forward of this batch
                forward(fd, channels, selector, start_report)
        while True:  # reap the program, and every orphan that was handed to this init
            try:
                reaped, reaped_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if reaped == 0:
                break
            if reaped == pid:
                status = reaped_status
                # Whatever it left running dies with it; the pipes then reach end-of-file.
                kill_all_others()
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = {
        "status": status,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "max_rss_bytes": usage.ru_maxrss * 1024,
        "largest_file_bytes": largest_file_bytes(SCRATCH_DIR),
    }
    write_frame(b"X", json.dumps(report).encode())
    while True:  # the supervisor reads the cgroups, then kills the container
        if time.monotonic() > deadline + 60:
            sys.exit(0)
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv)
