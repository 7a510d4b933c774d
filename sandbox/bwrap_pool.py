"""The bubblewrap backend's warm pool: each slot's zygote in a bubblewrap sandbox started as a
cold run's is, in cgroups made for the slot (the pool itself is sandbox/pool.py, the docker
backend's slots sandbox/docker.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from sandbox import bwrap
from sandbox.cgroups import RunCgroups, group_name
from sandbox.errors import SandboxUnavailable
from sandbox.pipes import memfd
from sandbox.pool import (
    CONTROL_FD,
    START_TIMEOUT_SECONDS,
    ZYGOTE_LIMITS,
    ZYGOTE_PATH,
    log_zygote_line,
)
from sandbox.supervise import (
    SCRATCH_DIR,
    TEARDOWN_TIMEOUT_SECONDS,
)

log = logging.getLogger(__name__)


class BwrapOuter:
    """Slots in bubblewrap sandboxes started like a cold run's, in cgroups made for each slot."""

    name = "bwrap"

    def __init__(self, bwrap_binary: str) -> None:
        self.bwrap_binary = bwrap_binary
        # bwrap dies with the thread that spawned it (--die-with-parent), and a grading thread
        # may end before the zygote should: they are all spawned from this one.
        self.spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-pool")

    def start(
        self, index: int, uid: int, files: Mapping[str, bytes], config: dict[str, object]
    ) -> _BwrapZygote:
        name = group_name("loopgrade-pool", uid if os.geteuid() == 0 else None)
        try:
            cgroups = RunCgroups.create(name, ZYGOTE_LIMITS, pids_max=4096)
        except OSError as error:
            raise SandboxUnavailable(f"the warm pool needs cgroups: {error}") from error
        zygote = _BwrapZygote(cgroups)
        try:
            zygote.start(self, index, uid, files, config)
        except BaseException:
            zygote.stop()
            raise
        return zygote

    def close(self) -> None:
        self.spawner.shutdown()


class _BwrapZygote:
    """A zygote in its bubblewrap sandbox (StartedZygote)."""

    def __init__(self, cgroups: RunCgroups) -> None:
        self.cgroups = cgroups
        self.proc: subprocess.Popen[bytes] | None = None
        self.control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # replaced at start
        self.zygote_pid = 0
        self.zygote_pidfd = -1

    def start(
        self,
        outer: BwrapOuter,
        index: int,
        uid: int,
        files: Mapping[str, bytes],
        config: dict[str, object],
    ) -> None:
        file_fds = [memfd(data) for data in files.values()]
        self.control.close()
        self.control, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log_r, log_w = os.pipe()
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        as_root = os.geteuid() == 0
        args = bwrap.bwrap_args(ZYGOTE_LIMITS, list(files)[1:], bwrap.python_binds(as_root))
        # The zygote makes namespaces for every job, and each job loads the filter itself: no
        # --disable-userns, no --seccomp; the rest of the cold run's arguments stand.
        args.remove("--disable-userns")
        del args[args.index("--seccomp") : args.index("--seccomp") + 2]
        under_scratch = [p for p in bwrap.python_dirs() if p.startswith(f"{SCRATCH_DIR}/")]
        config = {**config, "control_fd": CONTROL_FD, "kept_under_scratch": under_scratch}
        args = [
            *args[: args.index("--") + 1],
            sys.executable,
            "-I",
            ZYGOTE_PATH,
            json.dumps(config),
        ]
        moves = [[zygote_end.fileno(), CONTROL_FD], [info_w, bwrap.INFO_FD],
                 [block_r, bwrap.BLOCK_FD]]  # fmt: skip
        moves += [[fd, number] for number, fd in enumerate(file_fds, start=bwrap.FIRST_FILE_FD)]
        rlimits = bwrap.run_rlimits(ZYGOTE_LIMITS, has_cgroups=True, root=as_root)
        launch = bwrap.launcher_config(
            outer.bwrap_binary, args, moves, uid if as_root else None, rlimits
        )
        try:
            self.proc = outer.spawner.submit(
                subprocess.Popen,
                [sys.executable, "-I", "-S", str(bwrap.LAUNCHER), json.dumps(launch)],
                stdin=subprocess.DEVNULL, stdout=log_w, stderr=log_w,
                pass_fds=[fd for fd, _ in moves], start_new_session=True,
                env={"LANG": "C.UTF-8"},
            ).result()  # fmt: skip
        finally:
            for fd in [log_w, info_w, block_r, *file_fds]:
                os.close(fd)
            zygote_end.close()
        threading.Thread(target=_log_lines, args=(log_r, index), daemon=True).start()
        try:
            # The slot's start budget, not a cold run's set-up time: on a loaded (or emulated)
            # machine bubblewrap's set-up alone has taken over ten seconds.
            self.zygote_pid = bwrap.read_child_pid(info_r, START_TIMEOUT_SECONDS)
            self.zygote_pidfd = os.pidfd_open(self.zygote_pid)
            self.cgroups.attach(self.zygote_pid)
            if not as_root:
                bwrap.set_rlimits_inside(self.zygote_pid, rlimits)
            os.write(block_w, b"go")
        finally:
            os.close(info_r)
            os.close(block_w)

    def stop(self) -> None:
        self.control.close()
        self.cgroups.remove(TEARDOWN_TIMEOUT_SECONDS)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(TEARDOWN_TIMEOUT_SECONDS)
            self.proc = None
        if self.zygote_pidfd >= 0:
            os.close(self.zygote_pidfd)
            self.zygote_pidfd = -1


def _log_lines(fd: int, index: int) -> None:
    """Log what a zygote (or bubblewrap around it) prints: only its own failures."""
    with open(fd, "rb") as stream:
        for line in stream:
            log_zygote_line(index, line)
