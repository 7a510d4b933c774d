"""Each limit ends the run with a kill of the whole tree and sets its own flag."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from sandbox import Limits, RunResult, run
from sandbox import cgroups as sandbox_cgroups
from tests.sandbox.conftest import (
    fast,
    host_pids_of_uid,
    release,
    sandbox_containers,
    uid_of,
    wait_for_processes,
    wait_for_release,
)

MARGIN_SECONDS = 1.5
# CPU for a test that means to hit another cap, even where the machine is emulated and its CPU
# time swells with the host's load (tests/sandbox/test_cgroup2.py): it must not hit this one.
ROOM_CPU_SECONDS = 30.0


def nothing_left(backend: str) -> bool:
    """No sandbox of this test process is left (containers; a bwrap run's uid is checked where
    the test knows it)."""
    return backend != "docker" or sandbox_containers() == []


def only_flag(result: RunResult) -> str | None:
    """The one flag set; fails if several are."""
    flags = [
        name
        for name in (
            "timed_out", "cpu_time_exceeded", "memory_exceeded", "process_limit_exceeded",
            "file_size_exceeded", "open_files_exceeded", "output_truncated", "payload_truncated",
        )
        if getattr(result, name)
    ]  # fmt: skip
    assert len(flags) <= 1, flags
    return flags[0] if flags else None


@pytest.mark.parametrize(
    "program",
    ["while True: pass", "import time; time.sleep(60)"],
    ids=["busy-loop", "sleep"],
)
def test_wall_timeout(program: str, backend: str) -> None:
    limits = fast(wall_timeout_seconds=2.0, cpu_seconds=30.0)
    result = run(program, {}, limits)
    assert only_flag(result) == "timed_out"
    assert result.signal == signal.SIGKILL
    assert nothing_left(backend)
    assert (
        limits.wall_timeout_seconds
        <= result.wall_seconds
        < limits.wall_timeout_seconds + MARGIN_SECONDS
    )


def test_ignoring_sigterm_does_not_help(backend: str) -> None:
    program = (
        "import signal, time\n"
        "for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n"
        "    signal.signal(number, signal.SIG_IGN)\n"
        "time.sleep(60)\n"
    )
    result = run(program, {}, fast(wall_timeout_seconds=2.0))
    assert result.timed_out
    assert result.wall_seconds < 2.0 + MARGIN_SECONDS


def test_cpu_time_limit(backend: str) -> None:
    result = run("while True: pass", {}, fast(cpu_seconds=1.0))
    assert only_flag(result) == "cpu_time_exceeded"
    assert 1.0 <= result.cpu_seconds < 1.5  # CPU time, unlike wall time, is not slowed by others


def test_memory_bomb_of_bytes(backend: str) -> None:
    program = "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n"
    result = run(program, {}, fast(memory_bytes=128 << 20, cpu_seconds=ROOM_CPU_SECONDS))
    assert only_flag(result) == "memory_exceeded"
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes > 64 << 20
    # The host, and the next run, are fine.
    next_run = run("import os; os.write(3, b'ok')", {}, fast(cpu_seconds=ROOM_CPU_SECONDS))
    assert next_run.payload == b"ok"


def test_memory_bomb_of_a_huge_torch_tensor(backend: str) -> None:
    program = "import torch\nx = torch.ones(2**29)  # 2 GiB of float32\nprint(x.sum())\n"
    limits = fast(memory_bytes=768 << 20, cpu_seconds=20.0)
    result = run(program, {}, limits)
    assert result.memory_exceeded, result.stderr
    assert not result.timed_out
    assert b"tensor(" not in result.stdout


def test_fork_bomb_is_contained_and_leaves_nothing_behind() -> None:
    program = (
        "import os\n"
        "os.write(3, str(os.getuid()).encode())\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        pass\n"
    )
    result = run(program, {}, fast(max_processes=16, cpu_seconds=ROOM_CPU_SECONDS))
    assert only_flag(result) == "process_limit_exceeded"
    uid = int(result.payload)
    if os.geteuid() == 0:  # each run has its own uid, so nothing of it may be left
        assert host_pids_of_uid(uid) == []


@pytest.mark.parametrize(
    "writer",
    [
        # Python ignores SIGXFSZ: the write fails with EFBIG and the program carries on.
        "try:\n    open('big', 'wb').write(b'x' * (2 << 20))\nexcept OSError as error:\n"
        "    print(error)\n",
        # Any other program is killed by SIGXFSZ.
        "import subprocess\nsubprocess.run(['/usr/bin/head', '-c', '2000000', '/dev/zero'],"
        " stdout=open('big', 'wb'))\n",
    ],
    ids=["python-efbig", "child-sigxfsz"],
)
def test_file_size_limit(writer: str, backend: str) -> None:
    result = run(writer, {}, fast(file_size_bytes=1 << 20))
    assert only_flag(result) == "file_size_exceeded"


def test_open_files_limit(backend: str) -> None:
    program = (
        "import time\n"
        "files = []\n"
        "try:\n"
        "    while True:\n"
        "        files.append(open('/dev/null'))\n"
        "except OSError as error:\n"
        "    print(error)\n"
        "time.sleep(30)\n"
    )
    result = run(program, {}, fast(open_files=32))
    assert only_flag(result) == "open_files_exceeded"


def test_output_flood_is_capped_and_ends_the_run(backend: str) -> None:
    program = (
        "import sys\nwhile True:\n    print('o' * 999)\n    print('e' * 999, file=sys.stderr)\n"
    )
    result = run(program, {}, fast(output_bytes=10_000))
    assert only_flag(result) == "output_truncated"
    assert len(result.stdout) + len(result.stderr) == 10_000
    assert set(result.stdout) <= set(b"o\n")
    assert nothing_left(backend)


def test_payload_flood_is_capped_and_ends_the_run(backend: str) -> None:
    program = "import os\nwhile True:\n    os.write(3, b'p' * 4096)\n"
    result = run(program, {}, fast(payload_bytes=10_000))
    assert only_flag(result) == "payload_truncated"
    assert result.payload == b"p" * 10_000


def test_a_payload_of_exactly_the_cap_is_not_truncated(backend: str) -> None:
    result = run("import os\nos.write(3, b'p' * 1000)\n", {}, fast(payload_bytes=1000))
    assert result.payload == b"p" * 1000
    assert not result.payload_truncated


def test_the_whole_tree_is_gone_after_a_kill(
    start_run: Callable[..., Future[RunResult]],
) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    program = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"  # a new session does not get it out
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "        time.sleep(60)\n"
        + wait_for_release(marker)
        + "while True:\n    print('flood' * 100)\n"
    )
    future = start_run(program, fast(output_bytes=10_000, cpu_seconds=ROOM_CPU_SECONDS))
    pids = wait_for_processes(marker, count=7, timeout_seconds=60.0)
    pidfds = [os.pidfd_open(pid) for pid in pids]
    uids = {uid_of(pid) for pid in pids}
    # Its memory group: the v1 memory hierarchy's, or the one v2 group.
    with open(f"/proc/{pids[0]}/cgroup") as cgroup_file:
        groups = dict(line.strip().split(":", 2)[1:] for line in cgroup_file)
    memory_group = groups.get("memory", groups[""])
    release(pids)
    result = future.result()
    assert result.output_truncated
    for pidfd in pidfds:
        with pytest.raises(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, 0)
        os.close(pidfd)
    # From the host it ran as an unprivileged uid, and nothing of that uid is left.
    assert 0 not in uids
    if os.geteuid() == 0:
        (uid,) = uids
        assert host_pids_of_uid(uid) == []
        if sandbox_cgroups.unavailable_reason() is None:  # it had cgroups: they are gone
            assert memory_group.endswith(f"/loopgrade-{uid}")
            hierarchy = "memory" if "memory" in groups else ""  # v1, or v2 mounted whole
            group_dir = sandbox_cgroups.CGROUP_ROOT / hierarchy / memory_group.lstrip("/")
            assert not group_dir.exists()


# Without cgroups (a cgroup v2 host, no rights to create groups) the rlimits and the polling of
# /proc carry the limits. Simulated by finding no group of this server's.


@pytest.fixture
def no_cgroups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox_cgroups, "own_group", lambda controller: None)


@pytest.mark.usefixtures("no_cgroups")
@pytest.mark.parametrize(
    ("program", "limits", "flag"),
    [
        ("while True: pass", fast(cpu_seconds=1.0), "cpu_time_exceeded"),
        (
            "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n",
            fast(memory_bytes=128 << 20),
            "memory_exceeded",
        ),
        (
            "import os, time\nfor _ in range(40):\n    try:\n        os.fork() or time.sleep(30)\n"
            "    except OSError:\n        pass\ntime.sleep(30)\n",
            fast(max_processes=16),
            "process_limit_exceeded",
        ),
    ],
    ids=["cpu", "memory", "processes"],
)
def test_limits_hold_without_cgroups(program: str, limits: Limits, flag: str) -> None:
    result = run(program, {}, limits)
    assert getattr(result, flag), result
    assert not result.timed_out
