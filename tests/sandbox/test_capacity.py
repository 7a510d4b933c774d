"""The pool's default size follows what the process may use: its cores, its cgroups' limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import capacity
from sandbox.limits import Limits

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3


def own_group(controller: str) -> Path | None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return capacity.CGROUP_ROOT / controller / path.lstrip("/")
    return None


@pytest.fixture
def v1_groups() -> Iterator[dict[str, Path]]:
    """A cpu and a memory group under this process's own (cgroup v1, as root)."""
    if os.geteuid() != 0:
        pytest.skip("making cgroups needs root")
    parents = {controller: own_group(controller) for controller in ("cpu", "memory")}
    if not all(parent is not None and parent.is_dir() for parent in parents.values()):
        pytest.skip("this host has no cgroup v1 cpu and memory hierarchies")
    name = f"loopgrade-capacity-{uuid.uuid4().hex[:8]}"
    groups = {controller: parent / name for controller, parent in parents.items() if parent}
    for group in groups.values():
        group.mkdir()
    try:
        yield groups
    finally:
        for group in groups.values():
            group.rmdir()


def capacity_inside(groups: dict[str, Path]) -> dict[str, int]:
    """What sandbox.capacity says in a process started inside `groups`."""
    joins = "".join(f"echo $$ > {group}/cgroup.procs; " for group in groups.values())
    report = (
        "import json; from sandbox import capacity as c; print(json.dumps({"
        "'cores': c.usable_cores(), 'memory': c.usable_memory_bytes(), "
        "'slots': c.default_pool_size()}))"
    )
    done = subprocess.run(
        ["sh", "-c", f'{joins}exec "$0" -c "$1"', sys.executable, report],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_without_limits_the_affinity_and_the_memory_count() -> None:
    assert capacity.usable_cores() <= len(os.sched_getaffinity(0))
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < capacity.usable_memory_bytes() <= physical
    assert 1 <= capacity.default_pool_size() <= capacity.usable_cores()


def test_a_cpu_quota_and_a_memory_limit_cut_the_pool(v1_groups: dict[str, Path]) -> None:
    (v1_groups["cpu"] / "cpu.cfs_period_us").write_text("100000")
    (v1_groups["cpu"] / "cpu.cfs_quota_us").write_text("50000")  # half a core
    memory = capacity.SERVER_MEMORY_BYTES + 3 * Limits().memory_bytes + GIB // 2
    (v1_groups["memory"] / "memory.limit_in_bytes").write_text(str(memory))
    inside = capacity_inside(v1_groups)
    assert inside == {"cores": 1, "memory": memory, "slots": 1}
    # More cores than the affinity allows: the affinity holds; the memory holds three slots.
    (v1_groups["cpu"] / "cpu.cfs_quota_us").write_text(str(100000 * 64))
    inside = capacity_inside(v1_groups)
    cores = len(os.sched_getaffinity(0))
    assert inside == {"cores": cores, "memory": memory, "slots": min(cores, 3)}


def test_a_memory_limit_of_a_parent_group_counts(v1_groups: dict[str, Path]) -> None:
    parent = v1_groups["memory"]
    child = parent / "inner"
    child.mkdir()
    try:
        memory = capacity.SERVER_MEMORY_BYTES + Limits().memory_bytes
        (parent / "memory.limit_in_bytes").write_text(str(memory))
        inside = capacity_inside({"memory": child})
        assert inside["memory"] == memory
        assert inside["slots"] == 1
    finally:
        child.rmdir()
