"""What this machine can carry: the cores and memory this process may use, and the pool that fits.

    usable_cores()          # CPU affinity, cut to the cgroup's CPU quota (v2 cpu.max, v1 CFS)
    usable_memory_bytes()   # physical memory, cut to the cgroup's memory limit (v2 or v1)
    default_pool_size()     # slots: one per usable core, as many as the memory holds

A container or a systemd unit often gives a process fewer cores and less memory than the
machine has (`os.cpu_count()` says the machine's); every ancestor group's limit counts, so the
smallest along the path from this process's group to the root is the one that holds.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

from sandbox.limits import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
# What the server itself keeps resident beside the pool: the app, torch, the trusted
# trajectories and cached judgments (docs/performance.md measures about 400 MiB).
SERVER_MEMORY_BYTES = 512 * 1024 * 1024
# A group's limit file's text and the group: the limit, or None for none.
Parser = Callable[[str, Path], float | None]


def usable_cores(cgroup_root: Path = CGROUP_ROOT) -> int:
    """Cores this process may run on at once: its affinity, at most its groups' CPU quota."""
    cores = len(os.sched_getaffinity(0))
    quotas = [
        *_limits(cgroup_root, "", "cpu.max", _v2_quota),
        *_limits(cgroup_root, "cpu", "cpu.cfs_quota_us", _v1_quota),
    ]
    # A quota of 1.5 cores keeps 2 threads busy three quarters of the time: rounded up.
    return max(1, min([cores, *(math.ceil(quota) for quota in quotas)]))


def usable_memory_bytes(cgroup_root: Path = CGROUP_ROOT) -> int:
    """Memory this process's groups may use: physical memory, at most their limits."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limits = [
        *_limits(cgroup_root, "", "memory.max", _v2_bytes),
        *_limits(cgroup_root, "memory", "memory.limit_in_bytes", _v1_bytes),
    ]
    return int(min([physical, *limits]))


def default_pool_size(limits: Limits | None = None, cgroup_root: Path = CGROUP_ROOT) -> int:
    """Warm pool slots: one per usable core (a slot is capped at one core), and no more than
    the memory holds beside the server with every slot at its cap (a slot's memory cgroup holds
    its zygote and its job together, at `memory_bytes`)."""
    per_slot = (limits or Limits()).memory_bytes
    room = usable_memory_bytes(cgroup_root) - SERVER_MEMORY_BYTES
    return max(1, min(usable_cores(cgroup_root), room // per_slot))


def _own_groups(cgroup_root: Path, controller: str) -> list[Path]:
    """This process's group in `controller`'s hierarchy ("" for v2) and its ancestors."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (controller == "" and controllers == "") or controller in controllers.split(","):
            mount = cgroup_root / controller if controller else cgroup_root
            if controller == "" and not (mount / "cgroup.controllers").exists():
                return []  # a v1 host: its "0::" line names no v2 hierarchy
            group = mount / path.lstrip("/")
            return [group, *group.parents[: len(group.relative_to(mount).parts)]]
    return []


def _limits(cgroup_root: Path, controller: str, name: str, parse: Parser) -> list[float]:
    found = []
    for group in _own_groups(cgroup_root, controller):
        try:
            value = parse((group / name).read_text(), group)
        except (OSError, ValueError):
            continue  # not this group's file (a root has none), or not readable here
        if value is not None:
            found.append(value)
    return found


def _v2_quota(text: str, group: Path) -> float | None:
    quota, period = text.split()
    return None if quota == "max" else int(quota) / int(period)


def _v1_quota(text: str, group: Path) -> float | None:
    quota = int(text)
    return None if quota < 0 else quota / int((group / "cpu.cfs_period_us").read_text())


def _v2_bytes(text: str, group: Path) -> float | None:
    return None if text.strip() == "max" else int(text)


def _v1_bytes(text: str, group: Path) -> float | None:
    return int(text)  # "no limit" is a huge number, which physical memory undercuts
