"""A uid (and gid of the same number) per running sandbox, when the server runs as root.

A uid of its own makes RLIMIT_NPROC count only that run's processes and keeps runs from
signalling or reading each other. Leases are flock()s on files under RUN_DIR, so they hold
across threads and across server processes on one host, and die with the process holding them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.errors import SandboxError

RUN_DIR = Path("/run/loopgrade-sandbox")
# Far above login uids, systemd's dynamic users (61184-65519), the usual /etc/subuid ranges
# (100000 + 65536 per user) and systemd-nspawn's (up to 0x6fffffff).
DEFAULT_UIDS = "2000000000-2000000063"
LEASE_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class UidLease:
    uid: int
    lock_fd: int

    def release(self) -> None:
        os.close(self.lock_fd)


def uid_range() -> range:
    """The uids sandboxes may use: LOOPGRADE_SANDBOX_UIDS="first-last"."""
    text = os.environ.get("LOOPGRADE_SANDBOX_UIDS", DEFAULT_UIDS)
    try:
        first, last = (int(part) for part in text.split("-"))
    except ValueError:
        raise SandboxError(f"LOOPGRADE_SANDBOX_UIDS={text!r} is not 'first-last'") from None
    if not 0 < first <= last < 2**32 - 1:
        raise SandboxError(f"LOOPGRADE_SANDBOX_UIDS={text!r} is not a range of non-root uids")
    return range(first, last + 1)


def _processes_of(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        # A zombie is already dead: only its parent's wait() can remove it.
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            pids.append(int(entry.name))
    return pids


def kill_leftovers(uid: int, timeout_seconds: float = 2.0) -> None:
    """Kill whatever still runs as `uid`: with its lease free, nothing of a live run does.

    A run whose supervisor died without tearing it down (a crashed server, a killed test) can
    leave a process behind; it would count against the next run's RLIMIT_NPROC and could see
    that run's files.
    """
    deadline = time.monotonic() + timeout_seconds
    while pids := _processes_of(uid):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise SandboxError(f"processes {pids} of sandbox uid {uid} survive SIGKILL")
        time.sleep(0.01)


def lease_uid(uids: range) -> UidLease:
    """Lock a free uid from `uids`, waiting while all are busy."""
    RUN_DIR.mkdir(mode=0o755, exist_ok=True)
    deadline = time.monotonic() + LEASE_TIMEOUT_SECONDS
    while True:
        for uid in uids:
            fd = os.open(RUN_DIR / f"uid-{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            kill_leftovers(uid)
            return UidLease(uid, fd)
        if time.monotonic() > deadline:
            raise SandboxError(
                f"all {len(uids)} sandbox uids are busy; widen LOOPGRADE_SANDBOX_UIDS"
            )
        time.sleep(0.05)
