"""Starts bubblewrap for one run: `python -I -S launcher.py CONFIG_JSON`, spawned by sandbox.bwrap.

It runs in a fresh single-threaded process (no preexec_fn in the threaded server) and uses only
the standard library. In order, it:
1. when root, makes a private mount namespace and binds the interpreter's directories under a
   world-traversable tmpfs: bwrap runs as the run's unprivileged uid and resolves every source
   path by name as that uid, so it could not reach an interpreter under /root (mode 700);
2. moves the inherited fds to the numbers bwrap's arguments name (the result channel at 3);
3. when root, sets the run's rlimits and drops to its uid and gid, with no supplementary groups;
4. execs bwrap.
Nothing of the learner runs before the exec; a failure ends this process with a message on stderr.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


def _mount(
    libc: ctypes.CDLL,
    source: str | None,
    target: str,
    fstype: str | None,
    flags: int,
    data: str | None = None,
) -> None:
    def encode(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    if libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def stage_directories(stage_dir: str, sources: list[str]) -> None:
    """Bind each source at stage_dir/<index> in a mount namespace private to this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare(CLONE_NEWNS): {os.strerror(errno)}")
    # Private, so that nothing mounted here ever shows up on the host.
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", stage_dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
    for index, source in enumerate(sources):
        target = os.path.join(stage_dir, str(index))
        os.mkdir(target, 0o755)
        _mount(libc, source, target, None, MS_BIND | MS_REC)


def place_fds(moves: list[list[int]]) -> None:
    """Give each inherited fd (current, wanted) its wanted number, whatever the current ones are."""
    # Park them all above any wanted number first, so no move overwrites a fd still to be moved.
    parked = [(fcntl.fcntl(current, fcntl.F_DUPFD, 100), wanted) for current, wanted in moves]
    for current, _ in moves:
        os.close(current)
    for fd, wanted in parked:
        os.dup2(fd, wanted)  # dup2 leaves the new fd inheritable, so bwrap gets it
        os.close(fd)


def main(argv: list[str]) -> None:
    config: dict[str, Any] = json.loads(argv[1])
    if config["stage_sources"]:
        stage_directories(config["stage_dir"], config["stage_sources"])
    place_fds(config["fds"])
    for limit, soft, hard in config["rlimits"]:
        resource.setrlimit(limit, (soft, hard))
    uid = config["uid"]
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    os.execv(config["bwrap"], [config["bwrap"], *config["args"]])


if __name__ == "__main__":
    main(sys.argv)
