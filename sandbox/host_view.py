"""What the supervisor reads of a run from the host: its processes in /proc, its scratch files.

All of it is the learner's to shape, so every reading tolerates a process that has just exited
and a file tree built to mislead or to exhaust: nothing here follows a symlink or walks without
bounds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

SCAN_ENTRIES, SCAN_DEPTH = 10_000, 16
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def parent_pid(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def process_tree(root_pid: int) -> list[int]:
    """root_pid and its descendants, from /proc/<pid>/task/<tid>/children."""
    found, pending = [], [root_pid]
    while pending:
        pid = pending.pop()
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                children = Path(f"/proc/{pid}/task/{task}/children").read_text()
                pending += [int(child) for child in children.split()]
        except OSError:
            pass  # it exited meanwhile
    return found


def process_stat(pid: int) -> tuple[float, int, int]:
    """CPU seconds, resident bytes and task count of one process (zeros if it is gone)."""
    try:
        # Fields after the command name, which may itself hold spaces and parentheses.
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0, 0, 0
    utime, stime, tasks, rss = int(fields[11]), int(fields[12]), int(fields[17]), int(fields[21])
    return (utime + stime) / CLOCK_TICKS, rss * PAGE_BYTES, tasks


def task_wait_seconds(pids: Iterable[int]) -> dict[int, float]:
    """How long each task (thread) of these processes has waited for a core, by task id: the
    seconds it spent runnable on a run queue since it began, the second field of
    /proc/<pid>/task/<tid>/schedstat. A task's figure grows when it gets a core, so it lags by
    the wait under way. Tasks that ended meanwhile are left out."""
    waits = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # it exited meanwhile
        for tid in tids:
            try:
                waited_ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
            waits[int(tid)] = waited_ns / 1e9
    return waits


def open_fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def file_size_cap_reached(scratch_fd: int, cap_bytes: int) -> bool:
    """Whether a file in scratch reached the RLIMIT_FSIZE cap.

    Python ignores SIGXFSZ, so a program that hits the cap gets EFBIG and may carry on or exit:
    the file left at the cap is the trace. Scratch is the only writable place.
    """
    usage = os.fstatvfs(scratch_fd)
    if (usage.f_blocks - usage.f_bfree) * usage.f_frsize < cap_bytes:
        return False  # cheap, and the answer for nearly every poll
    return _largest_file_bytes(scratch_fd) >= cap_bytes


def _largest_file_bytes(top_fd: int) -> int:
    """The largest regular file below top_fd, following no symlink, over a bounded walk.

    The tree is the learner's: it is walked by fd (a path could be swapped for a symlink out of
    the sandbox) and only so deep and so wide. It stays on scratch's file system: what is
    mounted inside it (the interpreter's venv, when it lives under /tmp) is not scratch.
    """
    budget = SCAN_ENTRIES
    scratch_device = os.fstat(top_fd).st_dev

    def walk(dir_fd: int, depth: int) -> int:
        nonlocal budget
        largest = 0
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                budget -= 1
                if budget < 0:
                    break
                try:
                    if entry.stat(follow_symlinks=False).st_dev != scratch_device:
                        continue
                    if entry.is_file(follow_symlinks=False):
                        largest = max(largest, entry.stat(follow_symlinks=False).st_size)
                    elif entry.is_dir(follow_symlinks=False) and depth < SCAN_DEPTH:
                        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                        sub_fd = os.open(entry.name, flags, dir_fd=dir_fd)
                        try:
                            largest = max(largest, walk(sub_fd, depth + 1))
                        finally:
                            os.close(sub_fd)
                except OSError:
                    continue  # removed meanwhile
        return largest

    return walk(top_fd, 0)
