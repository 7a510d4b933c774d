"""The warm pool: isolation of every child, limits, siblings, the zygote's restart, fallback.

One pool of two slots per outer sandbox serves the module: bubblewrap, and the docker backend's
slot containers (where the engine and the grading image are here). Its program runs whatever
/sandbox/job.py holds, so each test sends its own code; the zygotes warm up on a trusted torch
loop (where LOOPGRADE_TEST_POOL_WITHOUT_TORCH is set, on plain Python and without importing
torch at all: tests/sandbox/test_cgroup2.py's emulated machine, where that import takes a
minute, runs tests whose jobs need none). The jobs' isolation is the zygote's, the same in both;
the docker pool gets the tests of what its outer layer holds (the container's cgroups, its
processes, its files), not every cap again. The bwrap tests run twice: in this (root) server,
and in a pytest that is not root, in a group delegated to it
(test_a_server_that_is_not_root_passes_these_tests_in_a_delegated_group); on cgroup v1 here, and
on v2 in a virtual machine (tests/sandbox/test_cgroup2.py).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyseccomp
import pytest

import sandbox
from sandbox import Limits, PoolProgram, RunResult, SandboxUnavailable, bwrap, cgroups, seccomp
from sandbox import docker as docker_backend
from sandbox.backends import BACKENDS
from sandbox.bwrap_pool import BwrapOuter
from sandbox.cgroups import own_path
from sandbox.pool import START_TIMEOUT_SECONDS, Pool
from sandbox.supervise import ENVIRONMENT
from tests.sandbox.conftest import POOL_NEEDS_GROUPS, docker_unavailable_reason, fast

pytestmark = POOL_NEEDS_GROUPS

PROGRAM = "exec(compile(open('/sandbox/job.py').read(), '/sandbox/job.py', 'exec'))\n"
WITHOUT_TORCH = bool(os.environ.get("LOOPGRADE_TEST_POOL_WITHOUT_TORCH"))
if WITHOUT_TORCH:
    WARM_UP = "import json, os\nweights = [0.5 * step for step in range(100)]\n"
    BENIGN = "report(float(sum(range(4))))\n"  # a sibling's job
else:
    WARM_UP = (
        "import torch\n"
        "model = torch.nn.Linear(2, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
        "model(torch.ones(1, 2)).sum().backward()\n"
        "optimizer.step()\n"
    )
    BENIGN = "import torch\nreport(torch.arange(4.0).sum().item())\n"
POOL_PROGRAM = PoolProgram(PROGRAM, {"job.py": WARM_UP.encode()}, imports_torch=not WITHOUT_TORCH)
LIMITS = fast(wall_timeout_seconds=20.0)
REPORT = "import os, json\ndef report(value):\n    os.write(3, json.dumps(value).encode())\n"


OUTERS = tuple(BACKENDS)  # the pool's outer sandboxes, by the backend that fronts them
BWRAP_ONLY = pytest.mark.parametrize("runner", ["bwrap"], indirect=True)


def skip_without_docker(backend: str) -> None:
    if backend == "docker":
        reason = docker_unavailable_reason()
        if reason:
            pytest.skip(f"no docker sandbox on this host: {reason}")


@pytest.fixture(scope="module", params=OUTERS)
def runner(request: pytest.FixtureRequest) -> Iterator[sandbox.PoolRunner]:
    skip_without_docker(request.param)
    opened = sandbox.open_runner(request.param, pool=POOL_PROGRAM, pool_size=2)
    assert isinstance(opened, sandbox.PoolRunner), opened.status
    yield opened
    opened.close()


def run_job(runner: sandbox.PoolRunner, code: str, limits: Limits = LIMITS) -> RunResult:
    return runner.run(PROGRAM, {"job.py": (REPORT + code).encode()}, limits)


def reported(result: RunResult) -> object:
    assert result.exit_code == 0, result
    return json.loads(result.payload)


@pytest.mark.skipif(WITHOUT_TORCH, reason="the zygotes warmed up without torch")
def test_a_child_runs_warm_with_torch_already_imported(runner: sandbox.PoolRunner) -> None:
    code = (
        "import sys\nwarm = 'torch' in sys.modules\nimport torch\n"
        "print('out')\nprint('err', file=sys.stderr)\n"
        "report({'warm': warm, 'threads': torch.get_num_threads(),"
        " 'sum': torch.ones(3).sum().item(), 'cwd': os.getcwd(),"
        " 'files': sorted(os.listdir('/sandbox')), 'uid': os.getuid(),"
        " 'environment': dict(os.environ)})\n"
    )
    result = run_job(runner, code)
    result_uid = json.loads(result.payload)["uid"]
    assert reported(result) == {
        "warm": True,
        "threads": 1,
        "sum": 3.0,
        "cwd": "/tmp",
        "files": ["job.py", "main.py"],
        "uid": result_uid,
        "environment": ENVIRONMENT,  # a cold run's, the zygote's own left behind
    }
    # Its own user namespace maps the slot's host uid, as itself, and nothing else.
    # (Leased by a root server; a server that is not root: its own.)
    assert {slot.uid for slot in runner.pool.slots} == (
        {slot.lease.uid for slot in runner.pool.slots if slot.lease} or {os.geteuid()}
    )
    assert result_uid in {slot.uid for slot in runner.pool.slots}
    assert (result.stdout, result.stderr) == (b"out\n", b"err\n")
    assert result.limit_hit is None


def test_a_child_gets_fresh_randomness_and_working_threads_and_logging(
    runner: sandbox.PoolRunner,
) -> None:
    # A job is cloned without the interpreter's fork hooks (sandbox/zygote.py): what they
    # would do must still hold. Its own random sequence, as after os.fork or in a cold run;
    # threads, locks and logging that work (a lock left held would hang it to the wall clock).
    code = (
        "import logging, random, threading\n"
        "results = []\n"
        "worker = threading.Thread(target=lambda: results.append(threading.get_ident()))\n"
        "worker.start()\n"
        "worker.join(5)\n"
        "logging.basicConfig(format='%(message)s')\n"
        "logging.getLogger('job').warning('logged')\n"
        "report({'random': random.random(), 'joined': not worker.is_alive(),\n"
        "        'ran': len(results), 'main': threading.current_thread() is\n"
        "        threading.main_thread(), 'threads': threading.active_count()})\n"
    )
    # One more job than slots: two of them are children of the same zygote.
    results = [run_job(runner, code) for _ in range(len(runner.pool.slots) + 1)]
    randoms = set()
    for result in results:
        report = reported(result)
        assert isinstance(report, dict)
        randoms.add(report.pop("random"))
        assert report == {"joined": True, "ran": 1, "main": True, "threads": 1}
        assert result.stderr == b"logged\n"
    assert len(randoms) == len(results)


@BWRAP_ONLY
def test_a_program_other_than_the_pools_runs_cold(runner: sandbox.PoolRunner) -> None:
    result = runner.run("import os\nos.write(3, str(os.getpid()).encode())\n", {}, LIMITS)
    assert result.payload == b"1"


def test_nothing_a_child_writes_is_seen_by_the_next(runner: sandbox.PoolRunner) -> None:
    write = (
        "open('/tmp/left-behind', 'w').write('x')\n"
        "for path in ('/sandbox/left-behind', '/dev/shm/left-behind', '/left-behind'):\n"
        "    try:\n        open(path, 'w').write('x')\n    except OSError:\n        pass\n"
        "report(0)\n"
    )
    look = (
        "import glob\n"
        "report(sorted(glob.glob('/tmp/*') + glob.glob('/dev/shm/*') + glob.glob('/sandbox/*')"
        " + glob.glob('/left-behind')))\n"
    )
    for _ in runner.pool.slots:  # sequential runs take the slots in turn
        reported(run_job(runner, write))
    # In a job's fresh /tmp stand only the mount points of an interpreter installed under /tmp
    # (the image's is under /opt).
    interpreter = [f"/tmp/{Path(path).parts[2]}" for path in bwrap.python_dirs()
                   if path.startswith("/tmp/") and runner.name == "bwrap"]  # fmt: skip
    for _ in runner.pool.slots:
        assert reported(run_job(runner, look)) == sorted(
            [*interpreter, "/sandbox/job.py", "/sandbox/main.py"]
        )


def test_a_child_cannot_see_signal_or_trace_a_sibling_or_the_zygote(
    runner: sandbox.PoolRunner,
) -> None:
    zygotes = [slot.zygote_pid for slot in runner.pool.slots]
    sleeper = "import time\ntime.sleep(3)\nreport('survived')\n"
    attack = (
        "import ctypes, signal\n"
        "visible = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "signalled = []\n"
        f"for pid in list(range(2, 4096)) + {zygotes!r}:\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n        signalled.append(pid)\n"
        "    except OSError:\n        pass\n"
        "try:\n    os.kill(-1, signal.SIGKILL)\n    signalled.append(-1)\n"
        "except OSError:\n    pass\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"traced = [pid for pid in (1, 2, 3) + tuple({zygotes!r})"
        " if libc.ptrace(16, pid, 0, 0) == 0]\n"  # PTRACE_ATTACH
        "report({'visible': visible, 'signalled': signalled, 'traced': traced})\n"
    )
    with ThreadPoolExecutor(1) as background:
        sleeping = background.submit(run_job, runner, sleeper)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS + 30  # a restart first, maybe
        while not any(slot.job_pids() for slot in runner.pool.slots if slot.cgroups):
            assert time.monotonic() < deadline, "the sleeper never started"
            time.sleep(0.01)
        assert reported(run_job(runner, attack)) == {"visible": [1], "signalled": [], "traced": []}
        assert reported(sleeping.result()) == "survived"
    assert [slot.zygote_pid for slot in runner.pool.slots] == zygotes
    assert runner.pool.ready_slots == 2


@pytest.mark.parametrize("runner", ["docker"], indirect=True)
def test_a_slot_container_holds_its_zygote_without_privilege(runner: sandbox.PoolRunner) -> None:
    client = docker_backend.connect()
    try:
        for slot in runner.pool.slots:
            assert isinstance(slot.zygote, docker_backend.SlotContainer) and slot.lease
            container = client.api.inspect_container(slot.zygote.container_id)
            host = container["HostConfig"]
            assert (host["CapDrop"], host["CapAdd"], host["Privileged"]) == (["ALL"], None, False)
            assert (host["NetworkMode"], host["IpcMode"], host["ReadonlyRootfs"]) == (
                "none", "none", True,
            )  # fmt: skip
            assert "no-new-privileges:true" in host["SecurityOpt"]
            assert (host["MaskedPaths"], host["ReadonlyPaths"]) == (["/sys/firmware"], [])
            # Beside the server's own CPU group, as a bwrap slot: a CPU weight of its own.
            assert host["CgroupParent"] == own_path("cpu")
            assert container["Config"]["User"] == f"{slot.lease.uid}:{slot.lease.uid}"
            assert container["State"]["Pid"] == slot.zygote_pid
            # As the kernel holds the zygote: the container's profile, no capability at all.
            status = dict(
                line.split(":\t", 1)
                for line in Path(f"/proc/{slot.zygote_pid}/status").read_text().splitlines()
            )
            assert (status["Seccomp"], status["Seccomp_filters"], status["NoNewPrivs"]) == (
                "2", "1", "1",
            )  # fmt: skip
            assert {status[name] for name in ("CapEff", "CapPrm", "CapBnd")} == {"0" * 16}
    finally:
        client.close()
    # What the container allows the zygote (namespaces, mounts), the job's own filter refuses.
    code = (
        "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def refused(result):\n    return result == -1 and ctypes.get_errno() == errno.EPERM\n"
        "status = open('/proc/self/status').read()\n"
        "report({'unshare': refused(libc.unshare(0x10000000)),"
        " 'clone': refused(libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)),"
        " 'mount': refused(libc.mount(b'tmpfs', b'/tmp', b'tmpfs', 0, None)),"
        " 'filters': status.split('Seccomp_filters:')[1].split()[0]})\n"
    )
    assert reported(run_job(runner, code)) == {
        "unshare": True, "clone": True, "mount": True, "filters": "2",
    }  # fmt: skip


def test_the_slot_containers_profile_allows_namespaces_and_refuses_the_rest() -> None:
    """The profile, as the engine loads it, in a container of its own: a namespace clone and
    mount pass (the zygote's needs), every other refusal of a run stands."""
    skip_without_docker("docker")
    profile = json.dumps(seccomp.docker_profile(seccomp.SLOT_CONTAINER))
    number = {name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
              for name in ("clone", "keyctl", "clone3")}  # fmt: skip
    program = (
        "import ctypes, errno, fcntl, json, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def error(result):\n    return 0 if result >= 0 else ctypes.get_errno()\n"
        "flags = 0x10000000 | 0x20000000 | 0x20000 | 17\n"  # user, PID, mount; SIGCHLD
        f"pid = libc.syscall({number['clone']}, flags, 0, 0, 0, 0)\n"
        "if pid == 0:\n"  # the child, in its own user, PID and mount namespaces
        "    os._exit(0 if libc.mount(b'none', b'/', None, 0x4000 | 1 << 18, None) == 0 else 3)\n"
        "cloned = pid > 0 and os.waitpid(pid, 0)[1] == 0\n"
        "lock = error(libc.flock(os.open('/tmp', os.O_RDONLY), fcntl.LOCK_EX))\n"
        "print(json.dumps({'cloned and mounted': cloned, 'flock': lock,"
        " 'unshare': error(libc.unshare(0x10000000)),"
        f" 'keyctl': error(libc.syscall({number['keyctl']}, 0)),"
        f" 'clone3': error(libc.syscall({number['clone3']}, 0, 0))}}))\n"
    )
    client = docker_backend.connect()
    try:
        output = client.containers.run(
            docker_backend.DockerSettings.from_environment().image,
            [docker_backend.PYTHON, "-I", "-c", program],
            entrypoint=[], user="65534:65534", network_mode="none", read_only=True,
            tmpfs={"/tmp": "size=1m"}, cap_drop=["ALL"],
            security_opt=["no-new-privileges:true", f"seccomp={profile}"],
            labels={docker_backend.LABEL: "test", docker_backend.PID_LABEL: str(os.getpid())},
            remove=True,
        )  # fmt: skip
    finally:
        client.close()
    assert json.loads(output) == {
        "cloned and mounted": True, "flock": errno.EPERM, "unshare": errno.EPERM,
        "keyctl": errno.EPERM, "clone3": errno.ENOSYS,
    }  # fmt: skip


# Each attack and the cap that stops it. A fork bomb's copies of a torch process fill the
# memory cap about as fast as the process cap: which comes first depends on the machine. The
# memory bomb's bytes need no torch: the slot's memory cap is what it meets either way.
HOSTILE: dict[str, tuple[str, str | set[str]]] = {
    "fork bomb": (
        "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        {"process_limit_exceeded", "memory_exceeded"},
    ),
    "memory bomb": ("hog = [b'x' * (64 << 20) for _ in range(64)]\n", "memory_exceeded"),
    "CPU burn": ("while True:\n    pass\n", "cpu_time_exceeded"),
    "sleep": ("import time\ntime.sleep(60)\n", "timed_out"),
    "output flood": (
        "import sys\nwhile True:\n    sys.stdout.write('x' * 4096)\n",
        "output_truncated",
    ),
    "disk fill": ("open('/tmp/fill', 'wb').write(b'x' * (4 << 20))\n", "file_size_exceeded"),
}


@pytest.mark.parametrize(
    ("runner", "attack"),
    [("bwrap", attack) for attack in sorted(HOSTILE)]
    # What the slot container's cgroups hold; the rest is the zygote's, as under bwrap.
    + [("docker", "fork bomb"), ("docker", "memory bomb")],
    indirect=["runner"],
    scope="module",  # one pool for them all (with a direct argument, it would be per test)
)
def test_a_hostile_child_is_stopped_and_its_sibling_finishes(
    runner: sandbox.PoolRunner, attack: str
) -> None:
    code, flag = HOSTILE[attack]
    # A wall clock far above the CPU cap: the machine may be busy with other tests. Room in the
    # CPU cap for an attack on another cap: an emulated machine's kernel takes seconds of the
    # memory bomb's CPU time to reclaim before its OOM kill (tests/sandbox/test_cgroup2.py).
    flags = flag if isinstance(flag, set) else {flag}
    limits = fast(
        wall_timeout_seconds=3.0 if flags == {"timed_out"} else 120.0,
        cpu_seconds=2.0 if flags == {"cpu_time_exceeded"} else 30.0,
    )
    with ThreadPoolExecutor(1) as background:
        hostile = background.submit(run_job, runner, code, limits)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS + 30  # a restart first, maybe
        while not hostile.done() and not any(s.job_pids() for s in runner.pool.slots):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert reported(run_job(runner, BENIGN)) == 6.0
        result = hostile.result()
    assert result.limit_hit in flags, result
    for slot in runner.pool.slots:
        assert slot.job_pids() == set()  # the whole tree is gone
    assert reported(run_job(runner, BENIGN)) == 6.0


@BWRAP_ONLY
def test_a_jobs_peak_memory_is_its_own_or_not_given(runner: sandbox.PoolRunner) -> None:
    """A slot's group outlives its jobs: a job's peak is never an earlier job's. (cgroup v1 and
    v2 on Linux 6.12+ reset it per job; v2 before gives it only when the job raised the slot's
    peak, else None: sandbox/cgroups.py, RunCgroups.reset_peak.)"""
    # Room for 300 MiB beside the zygote, and CPU for an emulated machine to write them.
    limits = fast(wall_timeout_seconds=120.0, cpu_seconds=60.0, memory_bytes=1 << 30)
    big_bytes = 300 << 20
    big = run_job(runner, f"hog = b'x' * {big_bytes}\nreport(0)\n", limits)
    small = run_job(runner, "report(0)\n", limits)
    assert reported(big) == reported(small) == 0
    assert big.peak_memory_bytes is not None and big.peak_memory_bytes > big_bytes
    # The zygote's memory is in both; the big job's 300 MiB is not in the small one's.
    assert small.peak_memory_bytes is None or (
        small.peak_memory_bytes < big.peak_memory_bytes - big_bytes // 2
    )
    release = tuple(int(part) for part in os.uname().release.split(".")[:2])
    if cgroups.uses_v1() or release >= (6, 12):  # a peak reset per job: always given
        assert small.peak_memory_bytes is not None


HOLDER = "import time\ntime.sleep(600)\n"  # holds its slot until the test kills it
HOLDER_LIMITS = fast(wall_timeout_seconds=600.0, cpu_seconds=30.0)


def run_job_in_thread(runner: sandbox.PoolRunner, code: str) -> tuple[threading.Thread, RunResult]:
    return threading.current_thread(), run_job(runner, code)


@contextmanager
def every_slot_held_then(
    runner: sandbox.PoolRunner, code: str
) -> Iterator[tuple[list[Future[RunResult]], Future[tuple[threading.Thread, RunResult]]]]:
    """Busy every slot with a holder job, then post `code`: it waits for a slot. Whatever the
    test does, every holder is killed at the end."""
    pool = runner.pool
    with ThreadPoolExecutor(len(pool.slots) + 1) as background:
        holders = [background.submit(run_job, runner, HOLDER, HOLDER_LIMITS) for _ in pool.slots]
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS + 30  # a restart first, maybe
            while not all(slot.job_pids() for slot in pool.slots):
                assert time.monotonic() < deadline, "the holders never started"
                time.sleep(0.01)
            waiting = background.submit(run_job_in_thread, runner, code)
            while len(pool.waiting) != 1:
                assert time.monotonic() < deadline, "the job never queued for a slot"
                time.sleep(0.01)
            yield holders, waiting
        finally:
            while not all(holder.done() for holder in holders):
                for slot in pool.slots:
                    slot.kill_job()
                time.sleep(0.01)


@BWRAP_ONLY
def test_a_job_waiting_for_a_slot_is_begun_by_the_job_that_frees_it(
    runner: sandbox.PoolRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No thread hand-off between a job's end and the next one's start
    (docs/performance.md#the-freed-slots-thread-begins-the-next-job): the thread that
    supervised the freed slot's job begins the waiting job there."""
    pool = runner.pool
    begun_by: list[tuple[int, threading.Thread]] = []
    for slot in pool.slots:

        def spy(job: Any, slot: Any = slot, begin: Any = slot.begin) -> None:
            begun_by.append((slot.index, threading.current_thread()))
            begin(job)

        monkeypatch.setattr(slot, "begin", spy)
    with every_slot_held_then(runner, "report('waited')\n") as (holders, waiting):
        begun_by.clear()
        pool.slots[0].kill_job()  # whichever holder runs there
        own_thread, result = waiting.result(timeout=60)
        assert reported(result) == "waited"
        [freed], _ = wait(holders, timeout=60, return_when=FIRST_COMPLETED)
        assert freed.result().signal == signal.SIGKILL
        [(index, thread)] = begun_by
        assert index == 0 and thread is not own_thread  # the freed holder's thread began it
    assert all(holder.result().signal == signal.SIGKILL for holder in holders)
    assert len(pool.idle) == len(pool.slots) and not pool.waiting


@BWRAP_ONLY
def test_a_job_waiting_for_a_slot_whose_zygote_dies_starts_it_again(
    runner: sandbox.PoolRunner,
) -> None:
    pool = runner.pool
    with every_slot_held_then(runner, "report('again')\n") as (holders, waiting):
        dead = pool.slots[0].zygote_pid
        os.kill(dead, signal.SIGKILL)
        assert reported(waiting.result(timeout=START_TIMEOUT_SECONDS + 60)[1]) == "again"
        [lost], _ = wait(holders, timeout=60, return_when=FIRST_COMPLETED)
        with pytest.raises(sandbox.SandboxError):
            lost.result()
        assert pool.slots[0].zygote_pid != dead
    assert pool.ready_slots == len(pool.slots)


def test_the_end_of_a_jobs_set_up_is_seen_while_it_runs(runner: sandbox.PoolRunner) -> None:
    """The program's own part is held to the CPU cap from the end of the set-up it marks on fd 4
    (its CPU so far, then the close): the server sees that close while the job runs (nothing
    else may hold fd 4's pipe open). Seen only at the exit, the whole run would be held to the
    set-up's larger cap."""
    code = (
        "import time\n"
        "os.write(4, str(time.process_time()).encode())\n"
        "os.close(4)\n"
        "end = time.process_time() + 2.0\n"
        "while time.process_time() < end:\n"
        "    pass\n"
        "report('not stopped')\n"
    )
    result = run_job(runner, code, fast(cpu_seconds=1.0, startup_cpu_seconds=5.0))
    assert result.limit_hit == "cpu_time_exceeded" and result.payload == b""
    assert result.startup_cpu_seconds is not None


@BWRAP_ONLY
@pytest.mark.parametrize("failing", ["memfd_create", "write", "pipe"])
def test_a_job_that_cannot_be_made_leaves_no_fd_open_and_the_pool_serving(
    runner: sandbox.PoolRunner, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """Out of fds or memory while a job's pipes and inputs are made (the server's EMFILE, a
    memfd's ENOMEM): what was made is closed again, or each such job would leak a dozen fds."""
    real = getattr(os, failing)
    calls = 0

    def fails_the_third_time(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(*args)

    # Three inputs, a memfd each: the third memfd fails, or its write, or the third of six pipes.
    inputs = {"job.py": (REPORT + "report(1)\n").encode(), "a": b"a", "b": b"b"}
    before = sorted(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, failing, fails_the_third_time)
    with pytest.raises(OSError, match="Too many open files"):
        runner.run(PROGRAM, inputs, LIMITS)
    monkeypatch.undo()
    assert calls >= 3
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert reported(runner.run(PROGRAM, inputs, LIMITS)) == 1
    assert len(runner.pool.idle) == len(runner.pool.slots)


def test_a_zygote_that_dies_is_started_again(runner: sandbox.PoolRunner) -> None:
    for slot in runner.pool.slots:
        os.kill(slot.zygote_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while runner.pool.ready_slots:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert "0 of 2 slots ready" in runner.status
    assert reported(run_job(runner, "report('again')\n")) == "again"
    assert runner.pool.ready_slots >= 1


def test_an_interpreter_under_tmp_stays_visible_under_each_jobs_fresh_tmp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkout under /tmp (as a CI clone is) has its venv there: a job's own /tmp must not
    hide it, nor make it writable, nor keep what the job before wrote beside it."""
    interpreter_dir = Path(tempfile.mkdtemp(prefix="loopgrade-interpreter-", dir="/tmp"))
    try:
        interpreter_dir.chmod(0o755)
        (interpreter_dir / "marker").write_text("interpreter file")
        real_dirs = bwrap.python_dirs()
        monkeypatch.setattr(bwrap, "python_dirs", lambda: [*real_dirs, str(interpreter_dir)])
        opened = sandbox.open_runner("bwrap", pool=POOL_PROGRAM, pool_size=1)
        assert isinstance(opened, sandbox.PoolRunner), opened.status
        look = (
            f"import glob\ndirectory = {str(interpreter_dir)!r}\n"
            "try:\n    open(directory + '/planted', 'w').write('x')\n    planted = True\n"
            "except OSError:\n    planted = False\n"
            "left = glob.glob('/tmp/left-behind')\nopen('/tmp/left-behind', 'w').write('x')\n"
            "report({'marker': open(directory + '/marker').read(), 'planted': planted,"
            " 'left': left})\n"
        )
        try:
            first, second = (reported(run_job(opened, look)) for _ in range(2))
        finally:
            opened.close()
        assert first == second == {"marker": "interpreter file", "planted": False, "left": []}
        assert sorted(path.name for path in interpreter_dir.iterdir()) == ["marker"]
    finally:
        shutil.rmtree(interpreter_dir)


@pytest.mark.parametrize("backend", OUTERS)
def test_a_pool_that_cannot_start_leaves_the_runner_cold(
    caplog: pytest.LogCaptureFixture, backend: str
) -> None:
    skip_without_docker(backend)
    with caplog.at_level(logging.WARNING):
        opened = sandbox.open_runner(
            backend, pool=PoolProgram("raise SystemExit(3)\n"), pool_size=1
        )
    try:
        assert isinstance(opened, sandbox.BwrapRunner | sandbox.DockerRunner)
        assert opened.name == backend
        assert "every run is cold" in caplog.text
        assert "a cold" in opened.status
        assert opened.run("import os\nos.write(3, b'cold')\n", {}, LIMITS).payload == b"cold"
    finally:
        opened.close()


def test_a_docker_pool_is_not_offered_under_gvisor() -> None:
    settings = docker_backend.DockerSettings(runtime=docker_backend.GVISOR_RUNTIME)
    with pytest.raises(SandboxUnavailable, match="gVisor"):
        docker_backend.ContainerOuter(settings)


def test_a_pool_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        Pool(BwrapOuter("/usr/bin/bwrap"), PROGRAM, {}, b"", size=0)


def test_an_unknown_backend_is_refused_before_any_pool() -> None:
    with pytest.raises(SandboxUnavailable, match="not a sandbox backend"):
        sandbox.open_runner("chroot", pool=PoolProgram(PROGRAM), pool_size=1)


UNPRIVILEGED_UID = 65534
DELEGATED_V2_FILES = ("cgroup.procs", "cgroup.subtree_control", "cgroup.threads")
SYSTEM_PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PYTHON),
    reason="needs root, setpriv and a system python to act as a host that delegates a group",
)
@pytest.mark.timeout(1800)  # it runs this module's bwrap tests, one after another
def test_a_server_that_is_not_root_passes_these_tests_in_a_delegated_group(
    request: pytest.FixtureRequest,
) -> None:
    """The host (this test, as root) delegates a group (one per v1 controller, or one v2 group)
    to an unprivileged uid and starts a pytest of this module's bwrap tests in it, as that uid:
    its pool starts, grades, and holds every cap (the memory and pids groups' too), its slots
    running as that uid. Those this session's -k selects, if it has one."""
    keyword = request.config.option.keyword
    work = Path(tempfile.mkdtemp(prefix="loopgrade-unprivileged-", dir="/var/tmp"))
    delegated = []
    packages = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    bound = work / "venv" / packages  # the venv's packages bind-mounted here, if they are
    try:
        work.chmod(0o755)
        # The venv's interpreter lives under /root here: the server's is the system python, with
        # the venv's packages (hard links: same files, no copy; a read-only bind mount where
        # they are on another filesystem, as in tests/sandbox/test_cgroup2.py's machine).
        subprocess.run(
            [SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(work / "venv")], check=True
        )
        if os.stat(sys.prefix).st_dev == os.stat(work).st_dev:
            subprocess.run(["cp", "-al", f"{sys.prefix}/{packages}/.", str(bound)], check=True)
        else:
            subprocess.run(["mount", "--bind", "-o", "ro", f"{sys.prefix}/{packages}", str(bound)],
                           check=True)  # fmt: skip
        if cgroups.uses_v1():
            for controller in (*cgroups.REQUIRED, *cgroups.OPTIONAL):
                own = cgroups.own_group(controller)
                if own is not None and own / work.name not in delegated:
                    (own / work.name).mkdir()
                    os.chown(own / work.name, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
                    delegated.append(own / work.name)
        else:
            # cgroup v2, as systemd's Delegate=yes does it: a group with the controllers, whose
            # directory and the files that move processes and hand on controllers are the user's.
            base = cgroups.unified_base()
            assert base is not None
            cgroups.enable_controllers(base)
            group = base / work.name
            group.mkdir()
            for path in [group, *(group / name for name in DELEGATED_V2_FILES)]:
                os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
            delegated.append(group)
        home = work / "home"  # the unprivileged server's own: its HOME and pytest's temp
        home.mkdir()
        os.chown(home, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        # The shell (root) joins the delegated groups, then becomes the unprivileged server.
        join_then_exec = (
            'for group in $DELEGATED; do echo $$ > "$group/cgroup.procs"; done; exec "$@"'
        )
        completed = subprocess.run(
            ["sh", "-c", join_then_exec, "sh",
             "setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}",
             "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--",
             str(work / "venv" / "bin" / "python"), "-m", "pytest", "-q", "-x",
             "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio",
             "--durations=0", f"--basetemp={home / 'pytest'}",
             # Nothing of tests/conftest.py (the app's database) is theirs, nor hypothesis (a
             # second of CPU to import here, tens of seconds in test_cgroup2's machine).
             f"--confcutdir={Path(__file__).parent}",
             "-k", f"bwrap and ({keyword})" if keyword else "bwrap", __file__],
            cwd=REPO, capture_output=True, text=True, timeout=1700,
            env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(home),
                 "DELEGATED": " ".join(map(str, delegated)),
                 "LOOPGRADE_TEST_POOL_WITHOUT_TORCH": "1" if WITHOUT_TORCH else ""},
        )  # fmt: skip
    finally:
        for group in delegated:  # what the server left in it (nothing, if it closed its pools)
            for left in [*(path for path in group.iterdir() if path.is_dir()), group]:
                cgroups.RunCgroups({"left": left}).remove()
        if bound.is_mount():  # never remove the venv's own packages through it
            subprocess.run(["umount", str(bound)], check=True)
        shutil.rmtree(work)
    lines = completed.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    durations = [line for line in lines if re.match(r"\d+\.\d+s \w+ ", line)]
    print(f"the pytest of uid {UNPRIVILEGED_UID}: {summary}", *durations, sep="\n  ")  # -rA
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
    # None skipped: the module was not skipped for want of groups, nor any of its bwrap tests.
    assert "passed" in summary and "skipped" not in summary, summary
