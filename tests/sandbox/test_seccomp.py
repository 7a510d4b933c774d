"""The seccomp filter: every refused call is refused inside a real run, on every backend (torch
trains under it: tests/sandbox/test_run.py); and two runs at the same time cannot signal each
other through a lock or a file-change watch on a file they both read."""

from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import uuid
from collections.abc import Callable
from concurrent.futures import Future

import pyseccomp
import pytest

from sandbox import RunResult, run, seccomp
from tests.sandbox.conftest import FAST, release, wait_for_processes, wait_for_release

# A file every run reads, from the host's read-only /usr.
SHARED_FILE = "/usr/bin/env"


def _calls(rules: tuple[seccomp.Rule, ...]) -> list[tuple[str, int, list[int], int]]:
    """(name, number, arguments that meet the rule's conditions, expected errno) per rule."""
    calls = []
    for rule in rules:
        args = [0] * 6
        for condition in rule.conditions:
            args[condition.index] = (condition.value + 1) if condition.negate else condition.value
        number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, rule.syscall)
        calls.append((rule.syscall, number, args, rule.error))
    return calls


CALLER = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
refused = {}
for name, number, args, _ in json.loads(open("/sandbox/calls.json").read()):
    ctypes.set_errno(0)
    value = libc.syscall(ctypes.c_long(number), *[ctypes.c_ulong(arg) for arg in args])
    refused[f"{name}{args}"] = ctypes.get_errno() if value == -1 else f"returned {value}"
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
os.write(3, json.dumps({"refused": refused, "filters": int(status["Seccomp_filters"])}).encode())
"""


def test_every_refused_call_is_refused_inside_a_run(backend: str) -> None:
    calls = _calls(seccomp.EVERY_RUN)
    result = run(CALLER, {"calls.json": json.dumps(calls).encode()}, FAST)
    assert result.exit_code == 0, result.stderr
    outcome = json.loads(result.payload)
    assert outcome["refused"] == {f"{name}{args}": error for name, _, args, error in calls}
    # Under docker the engine's own profile is there too: ours is stacked on it, not instead.
    assert outcome["filters"] == (1 if backend == "bwrap" else 2)


def test_what_is_not_refused_still_works(backend: str) -> None:
    program = (
        "import fcntl, os, subprocess, threading\n"
        f"fd = os.open({SHARED_FILE!r}, os.O_RDONLY)\n"
        "flags = fcntl.fcntl(fd, fcntl.F_GETFD)\n"  # fcntl is refused only for locks
        "thread = threading.Thread(target=lambda: None)\n"
        "thread.start()\n"
        "thread.join()\n"
        "child = subprocess.run(['/bin/true']).returncode\n"  # clone3 refused: clone instead
        "os.write(3, f'{flags} {child}'.encode())\n"
    )
    result = run(program, {}, FAST)
    assert result.payload == b"1 0", result.stderr


def test_two_runs_at_once_cannot_signal_through_a_shared_file(
    backend: str, start_run: Callable[..., Future[RunResult]]
) -> None:
    """The sender locks and watches the shared file and waits; the receiver probes it meanwhile.

    The test holds the sender at a barrier until the receiver is done, so the two overlap
    whatever the machine's load. Without the filter the receiver would find the lock taken
    (EWOULDBLOCK) and the sender's watch would see the receiver's read.
    """
    marker = f"sender-{uuid.uuid4().hex}"
    sender = (
        "import fcntl, json, os\n"
        "outcome = {}\n"
        f"fd = os.open({SHARED_FILE!r}, os.O_RDONLY)\n"
        "for name, lock in (('flock', lambda: fcntl.flock(fd, fcntl.LOCK_EX)),\n"
        "                   ('lockf', lambda: fcntl.lockf(fd, fcntl.LOCK_SH))):\n"
        "    try:\n"
        "        lock()\n"
        "        outcome[name] = 'locked'\n"
        "    except OSError as error:\n"
        "        outcome[name] = error.errno\n"
        + wait_for_release(marker)
        + "os.write(3, json.dumps(outcome).encode())\n"
    )
    receiver = (
        "import ctypes, fcntl, json, os, struct\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "outcome = {}\n"
        f"fd = os.open({SHARED_FILE!r}, os.O_RDONLY)\n"
        "try:\n"
        "    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
        "    outcome['flock'] = 'free'\n"
        "except OSError as error:\n"
        "    outcome['flock'] = error.errno\n"
        "try:\n"
        "    query = struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0)\n"
        "    outcome['getlk'] = struct.unpack('hhqqi', fcntl.fcntl(fd, fcntl.F_GETLK, query))[0]\n"
        "except OSError as error:\n"
        "    outcome['getlk'] = error.errno\n"
        "watch = libc.inotify_init1(0)\n"
        "outcome['inotify'] = ctypes.get_errno() if watch < 0 else 'watching'\n"
        "os.write(3, json.dumps(outcome).encode())\n"
    )
    sending = start_run(sender, FAST)
    sender_pids = wait_for_processes(marker, count=1, timeout_seconds=30)
    # From the host: the waiting sender holds no lock on anything.
    with open("/proc/locks") as locks:
        held = [line for line in locks if any(f" {pid} " in line for pid in sender_pids)]
    received = run(receiver, {}, FAST)
    release(sender_pids)
    sent = sending.result()
    assert held == []
    eperm = 1
    assert json.loads(sent.payload) == {"flock": eperm, "lockf": eperm}, sent.stderr
    assert json.loads(received.payload) == {"flock": eperm, "getlk": eperm, "inotify": eperm}


def test_the_probe_would_see_a_lock_without_the_filter() -> None:
    """The receiver's probe is not vacuous: against an unfiltered lock holder it sees the lock."""
    read_end, write_end = os.pipe()
    holder = os.fork()
    if holder == 0:  # an unsandboxed sender: it locks, says so, and waits to be killed
        fd = os.open(SHARED_FILE, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(write_end, b"locked")
        select.select([], [], [])
        os._exit(0)
    try:
        assert os.read(read_end, 6) == b"locked"
        fd = os.open(SHARED_FILE, os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        os.kill(holder, 9)
        os.waitpid(holder, 0)
        os.close(read_end)
        os.close(write_end)


def test_a_filter_built_once_loads_in_a_forked_child_with_the_pools_extra_rules() -> None:
    """The warm pool's way: build once in the parent, load in each child; rules compose."""
    strict = seccomp.Filter(seccomp.EVERY_RUN + seccomp.NO_FORK + seccomp.UNIX_SOCKETS_ONLY)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        outcome: dict[str, str | int | None] = {}
        try:
            strict.load()
            for name, attempt in (
                ("flock", lambda: fcntl.flock(os.open(SHARED_FILE, os.O_RDONLY), fcntl.LOCK_SH)),
                ("fork", lambda: os.fork() or os._exit(0)),  # a child that got through ends
                ("inet", lambda: socket.socket(socket.AF_INET)),
                ("unix", lambda: socket.socket(socket.AF_UNIX).close()),
            ):
                try:
                    attempt()
                    outcome[name] = "allowed"
                except OSError as error:
                    outcome[name] = error.errno
        finally:
            os.write(write_end, json.dumps(outcome).encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        outcome = json.loads(reader.read())
    os.waitpid(child, 0)
    assert outcome == {"flock": 1, "fork": 1, "inet": 1, "unix": "allowed"}
    assert strict.bpf != seccomp.run_filter().bpf
