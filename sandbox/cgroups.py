"""cgroup v1 groups for one run: memory, pids, CPU accounting (and a one-core CPU cap).

Each run gets its own group in every controller, nested under the server's own group, so the
server's limits still hold. The sandbox's init joins them before any learner code runs; every
process it starts is born inside. The groups are removed after the run.

Making them needs the right to create groups in the server's own: root has it; a server that is
not root has it where the host delegated that group to its user (chowned it, as the Compose
worker's entrypoint does, or systemd's Delegate=). cgroup v2 is not supported: a v2-only host
runs with rlimits only, and no warm pool (docs/security.md).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import signal
import time
from pathlib import Path

from sandbox.limits import Limits

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
REQUIRED = ("memory", "pids", "cpuacct")
# Optional: it only caps a run at one core, so a CPU burn cannot starve the runs beside it.
OPTIONAL = ("cpu",)
CPU_PERIOD_US = 100_000
_GROUP_NUMBERS = itertools.count()  # group_name's, for runs as the server's own uid


def own_path(controller: str) -> str | None:
    """The server's own group in `controller`'s hierarchy, from /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def own_group(controller: str) -> Path | None:
    """The directory of the server's own group in `controller`'s v1 hierarchy, as mounted here.

    /proc/self/cgroup names the group from the hierarchy's root, but a container (without a
    cgroup namespace of its own) mounts only its own subtree: /proc/self/mountinfo says which.
    """
    own = own_path(controller)
    if own is None:
        return None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        after = fields[fields.index("-") + 1 :]  # the filesystem type, source, options
        if after[0] != "cgroup" or controller not in after[2].split(","):
            continue
        mount_root, mount_point = fields[3], fields[4]
        relative = os.path.relpath(own, mount_root)
        if not relative.startswith(".."):
            return Path(os.path.realpath(os.path.join(mount_point, relative)))
    return None


def group_name(prefix: str, leased_uid: int | None) -> str:
    """A name for a run's or a slot's groups: by its leased uid, unique on the host (and what a
    server that died left under that name is removed first), else unique in this process."""
    if leased_uid is not None:
        return f"{prefix}-{leased_uid}"
    return f"{prefix}-{os.getpid()}-{next(_GROUP_NUMBERS)}"


class RunCgroups:
    """The groups of one run, one directory per controller (co-mounted ones share it)."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, name: str, limits: Limits, pids_max: int) -> RunCgroups:
        """Make the groups with the run's limits; OSError saying why this host cannot."""
        cgroups = cls({})
        try:
            for controller in REQUIRED + OPTIONAL:
                own = own_group(controller)
                if own is None:
                    if controller in OPTIONAL:
                        continue
                    raise OSError(f"no cgroup v1 {controller} hierarchy")
                if not os.access(own, os.W_OK):
                    raise OSError(
                        f"uid {os.geteuid()} may not create groups in {own}: run as root, or "
                        "delegate that group to this user (docs/security.md)"
                    )
                path = own / name
                if path not in cgroups.dirs.values():
                    if path.exists():  # left by a server that died mid-run (group_name)
                        cls({controller: path}).remove()
                    path.mkdir()
                cgroups.dirs[controller] = path
            cgroups._write("memory", "memory.limit_in_bytes", limits.memory_bytes)
            if (cgroups.dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                # Memory plus swap: without it a run could spill past its limit into swap.
                cgroups._write("memory", "memory.memsw.limit_in_bytes", limits.memory_bytes)
            cgroups._write("pids", "pids.max", pids_max)
            if "cpu" in cgroups.dirs:
                cgroups._write("cpu", "cpu.cfs_period_us", CPU_PERIOD_US)
                cgroups._write("cpu", "cpu.cfs_quota_us", CPU_PERIOD_US)
        except OSError:
            cgroups.remove()
            raise
        return cgroups

    def _write(self, controller: str, file: str, value: int) -> None:
        (self.dirs[controller] / file).write_text(str(value))

    def _read(self, controller: str, file: str) -> str:
        return read_control_file(self.dirs[controller], file)

    def _counter(self, controller: str, file: str, key: str) -> int:
        for line in self._read(controller, file).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
        return 0

    def attach(self, pid: int) -> None:
        for path in set(self.dirs.values()):
            (path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> set[int]:
        return _members(self.dirs["pids"])

    def cpu_seconds(self) -> float:
        return int(self._read("cpuacct", "cpuacct.usage")) / 1e9

    def peak_memory_bytes(self) -> int:
        return int(self._read("memory", "memory.max_usage_in_bytes"))

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended in this group."""
        return self._counter("memory", "memory.oom_control", "oom_kill")

    def process_limit_hits(self) -> int:
        """Forks refused because the group was at pids.max."""
        return self._counter("pids", "pids.events", "max")

    def kill_all(self) -> None:
        _kill_members(self.dirs["pids"])

    def remove(self, timeout_seconds: float = 5.0) -> bool:
        """Kill what is left and remove the groups; False if they would not empty in time."""
        deadline = time.monotonic() + timeout_seconds
        remaining = set(self.dirs.values())
        while remaining:
            for path in list(remaining):
                try:
                    _kill_members(path)
                    path.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:  # EBUSY until the killed processes are reaped
                    continue
                remaining.discard(path)
            if remaining and time.monotonic() > deadline:
                log.error("sandbox cgroups %s did not empty", sorted(map(str, remaining)))
                return False
            if remaining:
                time.sleep(0.01)
        return True


@functools.cache  # once per reason, not once per run
def warn_unavailable(reason: str) -> None:
    log.warning("sandbox cgroups unavailable (%s): limiting runs with rlimits only", reason)


def read_control_file(group: Path, name: str) -> str:
    """The text of file `name` of a group, read by bare system calls: a warm pool's supervisor
    reads a dozen per job (its counters, its processes, polled), and pathlib's and io's layers
    around each read cost several times the read itself."""
    fd = os.open(os.path.join(group, name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def _members(path: Path) -> set[int]:
    return {int(pid) for pid in read_control_file(path, "cgroup.procs").split()}


def _kill_members(path: Path) -> None:
    """SIGKILL every process in the group at `path`, never one that merely reused a listed pid."""
    pidfds: dict[int, int] = {}
    try:
        for pid in _members(path):
            with contextlib.suppress(ProcessLookupError):
                pidfds[pid] = os.pidfd_open(pid)
        # A pid still listed after its pidfd was opened names a process of the group.
        still_here = _members(path)
        for pid, pidfd in pidfds.items():
            if pid in still_here:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        for pidfd in pidfds.values():
            os.close(pidfd)
