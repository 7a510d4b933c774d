"""Cgroups for one run or one warm pool slot: memory, pids, CPU accounting, a one-core CPU cap.

Kept whole: one interface over both cgroup hierarchies is what this module is for.

    groups = RunCgroups.create("loopgrade-2000000007", limits, pids_max=17)
    groups.attach(pid)                           # the sandbox's first process, before it runs
    groups.cpu_seconds(), groups.oom_kills(), groups.peak_memory_bytes(), ...
    groups.remove()

One interface over both kernels' hierarchies. cgroup v1 (a hierarchy per controller): a
directory per controller. cgroup v2 (unified): one directory, with memory.max, memory.swap.max,
pids.max, cpu.max and the counters of cpu.stat, memory.events, pids.events. Where the host has
a v1 memory hierarchy, v1 is used; otherwise v2.

Each run's groups are nested under the server's own group (found through /proc/self/cgroup and
/proc/self/mountinfo), so the server's limits still hold. The sandbox's init joins them before
any learner code runs; every process it starts is born inside. They are removed after the run.

Making them needs the right to create groups in the server's own: root has it; a server that is
not root has it where the host delegated that group to its user (chowned it: the Compose
worker's entrypoint does that on v1, systemd's Delegate=yes on v2). On v2 the server first moves
itself into a leaf group of its own (SERVER_LEAF): see enable_controllers. Where none of this is
possible, runs are held by rlimits only, and there is no warm pool (docs/security.md).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import os
import signal
import threading
import time
from pathlib import Path

from sandbox.limits import Limits

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
# cgroup v1: the hierarchies a run needs, and one it may do without.
REQUIRED = ("memory", "pids", "cpuacct")
# Optional: it only caps a run at one core, so a CPU burn cannot starve the runs beside it.
OPTIONAL = ("cpu",)
# cgroup v2: the controllers a run needs, and the optional one-core cap. CPU accounting (cpu.stat
# usage_usec) is in every v2 group, with or without the cpu controller.
UNIFIED_REQUIRED = ("memory", "pids")
UNIFIED_OPTIONAL = ("cpu",)
# cgroup v2: the leaf group the server moves itself into (enable_controllers says why).
SERVER_LEAF = "loopgrade-server"
CPU_PERIOD_US = 100_000
_GROUP_NUMBERS = itertools.count()  # group_name's, for runs as the server's own uid
_ENABLING = threading.Lock()  # slots start in parallel threads: one enables the controllers


def own_path(controller: str) -> str | None:
    """The server's own group in `controller`'s v1 hierarchy (or, for "", in the v2 one), from
    /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if controller == "" and number == "0" and controllers == "":
            return path
        if controller and controller in controllers.split(","):
            return path
    return None


def own_group(controller: str) -> Path | None:
    """The directory of the server's own group in `controller`'s v1 hierarchy (or, for "", in
    the v2 one), as mounted here.

    /proc/self/cgroup names the group from the hierarchy's root, but a container (without a
    cgroup namespace of its own) mounts only its own subtree: /proc/self/mountinfo says which.
    """
    own = own_path(controller)
    if own is None:
        return None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        after = fields[fields.index("-") + 1 :]  # the filesystem type, source, options
        if controller == "":
            if after[0] != "cgroup2":
                continue
        elif after[0] != "cgroup" or controller not in after[2].split(","):
            continue
        mount_root, mount_point = fields[3], fields[4]
        relative = os.path.relpath(own, mount_root)
        if not relative.startswith(".."):
            return Path(os.path.realpath(os.path.join(mount_point, relative)))
    return None


def unified_base() -> Path | None:
    """Where a v2 server makes its groups: its own group, or the parent of SERVER_LEAF once it
    has moved itself there."""
    own = own_group("")
    if own is not None and own.name == SERVER_LEAF:
        return own.parent
    return own


def uses_v1() -> bool:
    """Whether runs get v1 groups here: the host has a v1 memory hierarchy for the server."""
    return own_group("memory") is not None


def unavailable_reason() -> str | None:
    """Why this server may not make groups for its runs here, or None when it may. Changes
    nothing (RunCgroups.create may still fail for a reason seen only when it tries)."""
    if uses_v1():
        for controller in REQUIRED:
            own = own_group(controller)
            if own is None:
                return f"no cgroup v1 {controller} hierarchy"
            if not os.access(own, os.W_OK):
                return _not_delegated(own)
        return None
    base = unified_base()
    if base is None:
        return "no cgroup v1 memory hierarchy, and no cgroup v2 one"
    available = read_control_file(base, "cgroup.controllers").split()
    missing = [name for name in UNIFIED_REQUIRED if name not in available]
    if missing:
        return f"cgroup v2 group {base} has no {' or '.join(missing)} controller to hand out"
    if not all(os.access(base / name, os.W_OK) for name in ("", "cgroup.subtree_control")):
        return _not_delegated(base)
    return None


def _not_delegated(group: Path) -> str:
    return (
        f"uid {os.geteuid()} may not create groups in {group}: run as root, or delegate that "
        "group to this user (docs/security.md)"
    )


def enable_controllers(base: Path) -> list[str]:
    """Let the groups made in the v2 group `base` have the memory, pids and (if it can) cpu
    controllers; the controllers they get.

    cgroup v2's "no internal processes" rule: a group (other than the root) that holds processes
    itself cannot give controllers to its children. The server's own group holds the server (a
    systemd service with Delegate=yes starts in it), so the server first moves every process of
    that group into a leaf child, SERVER_LEAF; the runs' groups are made beside that leaf.
    """
    available = read_control_file(base, "cgroup.controllers").split()
    wanted = [name for name in UNIFIED_REQUIRED + UNIFIED_OPTIONAL if name in available]
    with _ENABLING:
        enabled = read_control_file(base, "cgroup.subtree_control").split()
        if all(name in enabled for name in wanted):
            return wanted
        is_root = not (base / "cgroup.type").exists()  # every group but the root has the file
        for _ in range(10):  # a process the server starts meanwhile is born in `base`
            if not is_root and (members := _members(base)):
                leaf = base / SERVER_LEAF
                leaf.mkdir(exist_ok=True)
                for pid in members:
                    with contextlib.suppress(ProcessLookupError):
                        (leaf / "cgroup.procs").write_text(str(pid))
            try:
                (base / "cgroup.subtree_control").write_text(" ".join(f"+{n}" for n in wanted))
                return wanted
            except OSError as error:
                if error.errno != errno.EBUSY:  # a process is (again) in `base` itself
                    raise
        raise OSError(f"processes keep arriving in {base}: cannot enable its controllers")


def group_name(prefix: str, leased_uid: int | None) -> str:
    """A name for a run's or a slot's groups: by its leased uid, unique on the host (and what a
    server that died left under that name is removed first), else unique in this process."""
    if leased_uid is not None:
        return f"{prefix}-{leased_uid}"
    return f"{prefix}-{os.getpid()}-{next(_GROUP_NUMBERS)}"


class RunCgroups:
    """The groups of one run: a directory per v1 controller (co-mounted ones share it), or the
    one v2 directory (`unified`), under the name of each v1 controller whose work it does."""

    def __init__(self, dirs: dict[str, Path], unified: bool = False) -> None:
        self.dirs = dirs
        self.unified = unified
        self._peak_fd = -1  # v2 on Linux 6.12+: memory.peak, reset for one job (reset_peak)
        self._peak_before_bytes: int | None = None  # v2 before 6.12: the slot's peak at reset

    @classmethod
    def create(cls, name: str, limits: Limits, pids_max: int) -> RunCgroups:
        """Make the groups with the run's limits; OSError saying why this host cannot."""
        cgroups = cls({}, unified=not uses_v1())
        try:
            if cgroups.unified:
                cgroups._make_unified(name)
            else:
                cgroups._make_v1(name)
            cgroups.set_limits(limits.memory_bytes, pids_max)
            if "cpu" in cgroups.dirs:
                if cgroups.unified:
                    cgroups._write("cpu", "cpu.max", f"{CPU_PERIOD_US} {CPU_PERIOD_US}")
                else:
                    cgroups._write("cpu", "cpu.cfs_period_us", CPU_PERIOD_US)
                    cgroups._write("cpu", "cpu.cfs_quota_us", CPU_PERIOD_US)
        except OSError:
            cgroups.remove()
            raise
        return cgroups

    def _make_v1(self, name: str) -> None:
        for controller in REQUIRED + OPTIONAL:
            own = own_group(controller)
            if own is None:
                if controller in OPTIONAL:
                    continue
                raise OSError(f"no cgroup v1 {controller} hierarchy")
            if not os.access(own, os.W_OK):
                raise OSError(_not_delegated(own))
            path = own / name
            if path not in self.dirs.values():
                _make_fresh(path)
            self.dirs[controller] = path

    def _make_unified(self, name: str) -> None:
        reason = unavailable_reason()
        base = unified_base()
        if reason is not None or base is None:
            raise OSError(reason)
        controllers = enable_controllers(base)
        path = base / name
        _make_fresh(path)
        # CPU accounting (cpu.stat) is in every v2 group: "cpuacct" names the same directory.
        self.dirs = {name: path for name in ["cpuacct", *controllers]}

    def set_limits(self, memory_bytes: int, pids_max: int) -> None:
        """Cap memory (swap included: none) and processes; a pool slot's change for each job."""
        if self.unified:
            self._write("memory", "memory.max", memory_bytes)
            if (self.dirs["memory"] / "memory.swap.max").exists():  # swap accounting is on
                self._write("memory", "memory.swap.max", 0)
        else:
            names = ["memory.limit_in_bytes"]
            if (self.dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                # Memory plus swap: without it a run could spill past its limit into swap.
                names.append("memory.memsw.limit_in_bytes")
            # memory+swap may never be below memory alone: raise it first, lower it last.
            if memory_bytes > int(self._read("memory", "memory.limit_in_bytes")):
                names.reverse()
            for file in names:
                self._write("memory", file, memory_bytes)
        self._write("pids", "pids.max", pids_max)

    def _write(self, controller: str, file: str, value: object) -> None:
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
        if self.unified:
            return self._counter("cpuacct", "cpu.stat", "usage_usec") / 1e6
        return int(self._read("cpuacct", "cpuacct.usage")) / 1e9

    def memory_bytes(self) -> int:
        """What the group's processes use now (the page cache they brought in included)."""
        name = "memory.current" if self.unified else "memory.usage_in_bytes"
        return int(self._read("memory", name))

    def reset_peak(self) -> None:
        """Start a new peak (a warm pool slot's, for each job) at what the group uses now.

        v1: memory.max_usage_in_bytes is reset. v2 on Linux 6.12+: memory.peak is reset for the
        fd that wrote to it, and read through that fd. v2 before 6.12, where memory.peak cannot
        be reset: its value now is kept, and peak_memory_bytes() says whether it rose since.
        """
        if not self.unified:
            self._write("memory", "memory.max_usage_in_bytes", 0)
            return
        self._close_peak_fd()
        self._peak_before_bytes = None
        path = os.path.join(self.dirs["memory"], "memory.peak")
        fd = -1
        with contextlib.suppress(PermissionError, FileNotFoundError):  # before 6.12 / 5.19
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        if fd >= 0:
            try:
                os.write(fd, b"reset\n")
                self._peak_fd = fd
                return
            except OSError as error:
                os.close(fd)
                if error.errno != errno.EINVAL:  # what root meets before 6.12
                    raise
        self._peak_before_bytes = self._slot_peak_bytes()

    def peak_memory_bytes(self) -> int | None:
        """The most the group used at once: since it was made, or since reset_peak(). None where
        this kernel cannot say it exactly: v2 before 5.19 (no memory.peak), and, after a reset
        before 6.12, when the slot's lifetime peak did not rise since (an earlier job, or the
        zygote's warm-up, holds it)."""
        if not self.unified:
            return int(self._read("memory", "memory.max_usage_in_bytes"))
        if self._peak_fd >= 0:
            return int(os.pread(self._peak_fd, 64, 0))
        peak = self._slot_peak_bytes()
        if self._peak_before_bytes is None or peak is None:
            return peak
        # The peak rose during the job: then the new one is the job's own highest use, exactly.
        return peak if peak > self._peak_before_bytes else None

    def _slot_peak_bytes(self) -> int | None:
        try:
            return int(self._read("memory", "memory.peak"))
        except FileNotFoundError:  # before Linux 5.19
            return None

    def _close_peak_fd(self) -> None:
        if self._peak_fd >= 0:
            os.close(self._peak_fd)
            self._peak_fd = -1

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended in this group."""
        if self.unified:
            return self._counter("memory", "memory.events", "oom_kill")
        return self._counter("memory", "memory.oom_control", "oom_kill")

    def process_limit_hits(self) -> int:
        """Forks refused because the group was at pids.max."""
        return self._counter("pids", "pids.events", "max")

    def kill_all(self) -> None:
        _kill_group(self.dirs["pids"])

    def remove(self, timeout_seconds: float = 5.0) -> bool:
        """Kill what is left and remove the groups; False if they would not empty in time."""
        self._close_peak_fd()
        deadline = time.monotonic() + timeout_seconds
        remaining = set(self.dirs.values())
        while remaining:
            for path in list(remaining):
                try:
                    _kill_group(path)
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


def _make_fresh(path: Path) -> None:
    if path.exists():  # left by a server that died mid-run (group_name)
        RunCgroups({"left": path}).remove()
    path.mkdir()


def _members(path: Path) -> set[int]:
    return {int(pid) for pid in read_control_file(path, "cgroup.procs").split()}


def _kill_group(path: Path) -> None:
    """SIGKILL every process in the group at `path` (a warm pool kills a job's alone by pid)."""
    kill_file = path / "cgroup.kill"
    if kill_file.exists():  # v2, Linux 5.14+: at once, a process forked meanwhile included
        kill_file.write_text("1")
    else:
        _kill_members(path)


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
