"""The sandbox on cgroup v2, for real: its cgroup tests run again in a machine whose only hierarchy
is v2.

This project's machine binds every controller to a v1 hierarchy, so the v2 side of
sandbox/cgroups.py cannot run on it. scripts/cgroup2-vm boots a virtual machine (QEMU, Debian's
kernel, cgroup2 alone at /sys/fs/cgroup, the host's files read-only, no network device) and
runs in it, as root, the tests of what v2 changes and no more (INNER_TESTS): a run's group
holding its caps and counting their hits (memory.max and the oom_kill event, pids.max and its
refusals, cpu.max, cpu.stat's usage) and killed whole (cgroup.kill) and removed; cold bwrap runs
stopped by those caps, their whole tree gone with their group; the warm pool as root (each job's
own limits and its own peak memory, a hostile job stopped while its sibling finishes), and then
once more as uid 65534 in a v2 group delegated to it (one more pool start). Each must pass.

The machine is emulated here (TCG: this host has no hardware KVM), where importing torch takes a
minute: the pool's zygotes warm up without it (LOOPGRADE_TEST_POOL_WITHOUT_TORCH), and none of
these tests imports it. Their CPU caps leave room for an emulated CPU's slowness and for the
host's load, which swells the guest's CPU time; the one test of a CPU cap's precision
(test_limits.py's test_cpu_time_limit) runs on the host only.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VM = REPO / "scripts" / "cgroup2-vm"
POOL = "tests/sandbox/test_pool.py::"
HOSTILE = POOL + "test_a_hostile_child_is_stopped_and_its_sibling_finishes"
# Each fails where v2 groups do not hold its cap (or are not there to count, kill or remove).
INNER_TESTS = [
    "tests/sandbox/test_cgroups.py::test_a_group_holds_its_caps_counts_their_hits_and_goes_whole",
    "tests/sandbox/test_limits.py::test_memory_bomb_of_bytes[bwrap]",
    "tests/sandbox/test_limits.py::test_fork_bomb_is_contained_and_leaves_nothing_behind",
    "tests/sandbox/test_limits.py::test_the_whole_tree_is_gone_after_a_kill",
    HOSTILE + "[bwrap-memory bomb]",
    HOSTILE + "[bwrap-fork bomb]",
    HOSTILE + "[bwrap-CPU burn]",
    POOL + "test_a_jobs_peak_memory_is_its_own_or_not_given[bwrap]",
    # The pool tests above, once more as a server that is not root.
    POOL + "test_a_server_that_is_not_root_passes_these_tests_in_a_delegated_group",
]
REQUIRE = bool(os.environ.get("LOOPGRADE_REQUIRE_SERVICES"))


def selection(node_ids: list[str]) -> list[str]:
    """pytest's arguments that run these tests: their files and a -k expression. (Given as node
    ids, each would be collected in a module of its own, each pool test with its own pool.)"""
    terms = []
    for node_id in node_ids:
        name, _, parameters = node_id.split("::")[1].partition("[")
        terms.append("(" + " and ".join([name, *re.findall(r"\w+", parameters)]) + ")")
    files = sorted({node_id.split("::")[0] for node_id in node_ids})
    return [*files, "-k", " or ".join(terms)]


def vm_missing() -> list[str]:
    """What scripts/cgroup2-vm needs that this host lacks (./dev test installs it all)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (the machine's 9p share of / and the tests inside run as root)")
    checked = subprocess.run([str(VM), "--check"], capture_output=True, text=True)
    missing += [line.removeprefix("cgroup2-vm: missing ") for line in checked.stdout.splitlines()]
    return missing


def inner_outcomes(report: str) -> dict[str, str]:
    """Each inner test's outcome, from pytest's -rA summary lines ("PASSED path::name[id]",
    "FAILED path::name - why"; a parameter's id may hold spaces)."""
    outcomes = {}
    for line in report.splitlines():
        match = re.fullmatch(r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/.+?)( - .*)?", line)
        if match:
            outcomes[match[2]] = match[1]
    return outcomes


@pytest.mark.timeout(900)
def test_the_sandbox_tests_pass_on_cgroup_v2_as_root_and_as_a_delegate() -> None:
    missing = vm_missing()
    if missing:
        message = f"no cgroup v2 machine here: it needs {'; '.join(missing)}"
        if REQUIRE:
            pytest.fail(f"{message} (LOOPGRADE_REQUIRE_SERVICES is set)")
        pytest.skip(message)
    # The machine first says what it is, so that a pass proves v2 was what the tests met.
    # Nothing of tests/conftest.py (the app's database) is these tests': not loaded; nor are
    # the hypothesis and anyio plugins, which they do not use (importing hypothesis takes a
    # second of CPU on the host, tens of seconds emulated).
    inner = (
        "cat /proc/self/cgroup; grep cgroup /proc/mounts; "
        "echo controllers: $(cat /sys/fs/cgroup/cgroup.controllers); "
        "echo network: $(ls /sys/class/net); "
        "export LOOPGRADE_TEST_POOL_WITHOUT_TORCH=1; "
        "exec .venv/bin/python -m pytest -p no:cacheprovider -p no:hypothesispytest -p no:anyio "
        "-rA -q --color=no --durations=0 "
        f"--basetemp=/tmp/pytest --confcutdir=tests/sandbox {shlex.join(selection(INNER_TESTS))}"
    )
    completed = subprocess.run(
        [str(VM), "--cwd", str(REPO), "--", "sh", "-c", inner],
        capture_output=True, text=True, timeout=840, cwd=REPO,
    )  # fmt: skip
    output = completed.stdout
    # For a failure: the inner failures' tracebacks, or else the end of what the machine said.
    failures = output.partition("= FAILURES =")[2].partition("= PASSES =")[0]
    tail = (failures[:12000] or output[-6000:]) + completed.stderr[-2000:]
    mounts = [line for line in output.splitlines() if " cgroup" in line and "/sys/fs/" in line]
    assert mounts == ["cgroup2 /sys/fs/cgroup cgroup2 rw,relatime,nsdelegate 0 0"], tail
    assert "network: lo" in output.splitlines(), tail  # loopback only: no network device
    assert "controllers: cpuset cpu io memory" in output, tail
    assert completed.returncode == 0, tail
    assert inner_outcomes(output) == dict.fromkeys(INNER_TESTS, "PASSED"), tail
    # What ran inside and how long each took, for the record (pytest -rA or -s shows it).
    summary = [line for line in output.splitlines() if re.match(r"\d+ passed", line)]
    print(f"inside the machine, as root: {summary[-1] if summary else ''}")
    for line in output.splitlines():
        if line.startswith(("the pytest of uid", "  ")) or re.match(r"\d+\.\d+s \w+ ", line):
            print(line)
