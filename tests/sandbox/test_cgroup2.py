"""The sandbox on cgroup v2, for real: its tests run again in a machine whose only hierarchy is v2.

This project's machine binds every controller to a v1 hierarchy, so the v2 side of
sandbox/cgroups.py cannot run on it. scripts/cgroup2-vm boots a virtual machine (QEMU, Debian's
kernel, cgroup2 alone at /sys/fs/cgroup, the host's files read-only, no network device) and
runs, inside it as root, the sandbox tests that lean on cgroups: the caps of cold bwrap runs
(memory, processes, CPU, the whole tree's end and its groups' removal), the basic runs, and the
warm pool's bwrap tests, among which test_a_server_that_is_not_root_passes_these_tests_in_a_
delegated_group runs them once more as uid 65534 in a v2 group delegated to it. This test reads
the inner pytest's report: each of those must have passed, none failed, none skipped.

Left out inside: the docker backend (no engine there), and the tests that import torch in a
cold run under a CPU cap, which QEMU's emulation (TCG, where the host has no hardware KVM, as
here) is too slow to pass: the import alone takes about 40 CPU seconds in it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VM = REPO / "scripts" / "cgroup2-vm"
INNER_FILES = [
    "tests/sandbox/test_limits.py",
    "tests/sandbox/test_run.py",
    "tests/sandbox/test_pool.py",
]
# Every test of those files but these (see the module's docstring).
LEFT_OUT = "not docker and not slot_containers and not torch_imports and not huge_torch_tensor"
# What must be among the passed: each cap on v2 groups, and the pool as root and as a delegate.
MUST_PASS = [
    "tests/sandbox/test_limits.py::test_cpu_time_limit[bwrap]",
    "tests/sandbox/test_limits.py::test_memory_bomb_of_bytes[bwrap]",
    "tests/sandbox/test_limits.py::test_fork_bomb_is_contained_and_leaves_nothing_behind",
    "tests/sandbox/test_limits.py::test_the_whole_tree_is_gone_after_a_kill",
    "tests/sandbox/test_pool.py::test_a_hostile_child_is_stopped_and_its_sibling_finishes"
    "[bwrap-memory bomb]",
    "tests/sandbox/test_pool.py::test_a_hostile_child_is_stopped_and_its_sibling_finishes"
    "[bwrap-fork bomb]",
    "tests/sandbox/test_pool.py::test_a_hostile_child_is_stopped_and_its_sibling_finishes"
    "[bwrap-CPU burn]",
    "tests/sandbox/test_pool.py::test_a_jobs_peak_memory_is_its_own_or_not_given[bwrap]",
    "tests/sandbox/test_pool.py::test_a_server_that_is_not_root_passes_these_tests_in_a_delegated_group",
]
REQUIRE = bool(os.environ.get("LOOPGRADE_REQUIRE_SERVICES"))


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


@pytest.mark.timeout(5400)  # emulated (TCG), the pool's zygotes take minutes to import torch
def test_the_sandbox_tests_pass_on_cgroup_v2_as_root_and_as_a_delegate() -> None:
    missing = vm_missing()
    if missing:
        message = f"no cgroup v2 machine here: it needs {'; '.join(missing)}"
        if REQUIRE:
            pytest.fail(f"{message} (LOOPGRADE_REQUIRE_SERVICES is set)")
        pytest.skip(message)
    # The machine first says what it is, so that a pass proves v2 was what the tests met.
    inner = (
        "cat /proc/self/cgroup; grep cgroup /proc/mounts; "
        "echo controllers: $(cat /sys/fs/cgroup/cgroup.controllers); "
        "echo network: $(ls /sys/class/net); "
        "exec .venv/bin/python -m pytest -p no:cacheprovider -rA -q --color=no "
        f"--basetemp=/tmp/pytest -k '{LEFT_OUT}' {' '.join(INNER_FILES)}"
    )
    completed = subprocess.run(
        [str(VM), "--cwd", str(REPO), "--", "sh", "-c", inner],
        capture_output=True, text=True, timeout=5000, cwd=REPO,
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
    outcomes = inner_outcomes(output)
    assert outcomes and set(outcomes.values()) == {"PASSED"}, tail
    assert [test for test in MUST_PASS if outcomes.get(test) != "PASSED"] == [], tail
    summary = [line for line in output.splitlines() if re.match(r"(\d+ \w+, )*\d+ passed", line)]
    assert summary and "failed" not in summary[-1], tail
    # What ran inside, for the record (pytest -rA or -s shows it).
    print("\n".join(line for line in output.splitlines() if "the pytest of uid" in line))
    print(f"inside the machine, as root: {summary[-1]}")
