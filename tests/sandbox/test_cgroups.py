"""A run's groups (sandbox/cgroups.py) on this host's hierarchy, v1 or v2: the kernel holds the
caps set in them, the counters read from them say what hit a cap, and the whole group is killed
and removed. (v2 runs in tests/sandbox/test_cgroup2.py's machine; this host's is v1.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from sandbox.cgroups import CPU_PERIOD_US, RunCgroups, group_name, read_control_file
from tests.sandbox.conftest import POOL_NEEDS_GROUPS, fast

pytestmark = POOL_NEEDS_GROUPS

PIDS_MAX = 4
FORKS = 8
# Waits until the test has put it in the group; forks beyond pids.max (the children sleep on);
# says how many forks were refused; burns a little CPU; then writes far beyond memory.max.
CHILD = (
    "import os, sys, time\n"
    "sys.stdin.read()\n"
    "refused = 0\n"
    f"for _ in range({FORKS}):\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            time.sleep(600)\n"
    "            os._exit(0)\n"
    "    except OSError:\n"
    "        refused += 1\n"
    "print(refused, flush=True)\n"
    "total = sum(range(10**6))\n"
    "hog = b'x' * (256 << 20)\n"
)


def test_a_group_holds_its_caps_counts_their_hits_and_goes_whole() -> None:
    limits = fast(memory_bytes=64 << 20)
    groups = RunCgroups.create(group_name("loopgrade-test", None), limits, pids_max=PIDS_MAX)
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-c", CHILD],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        groups.attach(child.pid)
        child.stdin.close()
        refused = int(child.stdout.readline())
        assert child.wait(timeout=120) == -signal.SIGKILL  # the kernel's OOM killer
        # pids.max: the child and its first PIDS_MAX - 1 children, every other fork refused.
        assert refused == FORKS - (PIDS_MAX - 1)
        assert groups.process_limit_hits() >= refused
        # memory.max (with no swap to spill into): one OOM kill, at a peak no higher.
        assert groups.oom_kills() == 1
        peak = groups.peak_memory_bytes()
        assert peak is not None and 32 << 20 < peak <= limits.memory_bytes
        assert groups.cpu_seconds() > 0
        # What is left (the sleeping children) dies at once, as a whole.
        assert len(groups.pids()) == PIDS_MAX - 1
        groups.kill_all()
        deadline = time.monotonic() + 10
        while groups.pids():
            assert time.monotonic() < deadline, groups.pids()
            time.sleep(0.01)
        child.stdout.close()
    finally:
        removed = groups.remove()
    assert removed
    assert not any(path.exists() for path in groups.dirs.values())


def test_a_group_caps_the_cpu_at_one_core_where_the_host_lends_the_cpu_controller() -> None:
    groups = RunCgroups.create(group_name("loopgrade-test", None), fast(), pids_max=PIDS_MAX)
    try:
        if "cpu" not in groups.dirs:  # optional: a delegated v2 group may not have it
            pytest.skip("this host's groups have no cpu controller: runs are not capped at a core")
        if groups.unified:
            assert read_control_file(groups.dirs["cpu"], "cpu.max").split() == [
                str(CPU_PERIOD_US), str(CPU_PERIOD_US),
            ]  # fmt: skip
        else:
            quota = read_control_file(groups.dirs["cpu"], "cpu.cfs_quota_us")
            assert int(quota) == CPU_PERIOD_US
    finally:
        assert groups.remove()
