"""The docker backend against each limit and escape, like the bubblewrap tests, on a real engine.

Every test here runs real containers from the grading runtime image (scripts/build-images.sh).
Where no engine answers, or the image is missing, they are skipped with the reason.
The gVisor tests at the end run the same containers under `runsc`, when the engine has it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

import sandbox
from sandbox import RunResult, SandboxError, SandboxUnavailable, run
from sandbox import docker as docker_backend
from tests.sandbox.conftest import FAST, docker_unavailable_reason, fast, sandbox_containers

REPO = Path(__file__).resolve().parents[2]
MARGIN_SECONDS = 1.5
SANDBOX_USER = 65534


@pytest.fixture(autouse=True)
def docker_backend_only(monkeypatch: pytest.MonkeyPatch) -> None:
    reason = docker_unavailable_reason()
    if reason:
        pytest.skip(f"no docker sandbox on this host: {reason}")
    monkeypatch.setenv("LOOPGRADE_SANDBOX", "docker")
    monkeypatch.delenv("LOOPGRADE_DOCKER_RUNTIME", raising=False)


# -- the contract of run() ---------------------------------------------------------------------


def test_the_backend_is_docker_and_returns_the_three_channels_apart() -> None:
    assert sandbox.backend_name() == "docker"
    program = (
        "import os, sys\n"
        "print('to stdout')\n"
        "print('to stderr', file=sys.stderr)\n"
        "os.write(3, b'the payload')\n"
    )
    result = run(program, {}, FAST)
    assert result.exit_code == 0, result.stderr
    assert result.signal is None
    assert result.payload == b"the payload"
    assert result.stdout == b"to stdout\n"
    assert result.stderr == b"to stderr\n"
    assert result.limit_hit is None
    assert 0 < result.wall_seconds < FAST.wall_timeout_seconds
    assert result.cpu_seconds > 0


def test_prints_and_forged_frames_never_reach_the_payload() -> None:
    # A frame as the container init writes them: P, a length, bytes; and a forged report.
    forged = b"P\x00\x00\x00\x05forgeX\x00\x00\x00\x02{}"
    program = (
        "import os, subprocess, sys\n"
        "print('forged payload')\n"
        "sys.stdout.flush()\n"
        f"os.write(1, {forged!r})\n"
        f"os.write(2, {forged!r})\n"
        "subprocess.run(['/bin/echo', 'forged payload 3'])\n"
    )
    result = run(program, {}, FAST)
    assert result.exit_code == 0, result.stderr
    assert result.payload == b""
    assert forged in result.stdout and forged in result.stderr
    assert b"forged payload 3" in result.stdout


def test_inputs_are_read_only_files_beside_the_program() -> None:
    program = (
        "import json, os\n"
        "names = sorted(os.listdir('/sandbox'))\n"
        "cases = open('/sandbox/cases.json').read()\n"
        "try:\n"
        "    open('/sandbox/cases.json', 'w')\n"
        "    writable = True\n"
        "except OSError:\n"
        "    writable = False\n"
        "os.write(3, json.dumps([names, cases, writable, os.getcwd()]).encode())\n"
    )
    result = run(program, {"cases.json": b'{"seed": 3}', "data.bin": b"\x00\x01"}, FAST)
    assert json.loads(result.payload) == [
        ["cases.json", "data.bin", "main.py"],
        '{"seed": 3}',
        False,
        "/tmp",
    ]


def test_exit_code_and_death_by_signal_are_reported() -> None:
    assert run("import sys; sys.exit(3)", {}, FAST).exit_code == 3
    crashed = run("import ctypes; ctypes.string_at(0)", {}, FAST)
    assert crashed.exit_code is None
    assert crashed.signal == signal.SIGSEGV
    assert crashed.limit_hit is None


# -- limits ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "program",
    [
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "import threading, time\nwhile True:\n    try:\n"
        "        threading.Thread(target=time.sleep, args=(60,)).start()\n"
        "    except RuntimeError:\n        pass\n",
    ],
    ids=["fork-bomb", "thread-explosion"],
)
def test_process_limit(program: str) -> None:
    result = run(program, {}, fast(max_processes=16))
    assert result.limit_hit == "process_limit_exceeded"
    assert not result.timed_out
    assert sandbox_containers() == []


# -- isolation ---------------------------------------------------------------------------------


def test_no_network_not_even_the_hosts_loopback() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        program = (
            "import json, os, socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    outcome = 'connected'\n"
            "except OSError as error:\n"
            "    outcome = type(error).__name__\n"
            "interfaces = [name for _, name in socket.if_nameindex()]\n"
            "os.write(3, json.dumps([outcome, interfaces]).encode())\n"
        )
        result = run(program, {}, FAST)
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert json.loads(result.payload) == ["ConnectionRefusedError", ["lo"]]


def test_no_file_of_the_host_is_reachable(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    paths = [str(secret), str(REPO / "pyproject.toml"), "/work/shared", "/root/.bashrc"]
    program = (
        "import json, os\n"
        f"paths = {paths!r}\n"
        "present = [path for path in paths if os.path.exists(path)]\n"
        "try:\n"
        "    open('/etc/shadow').read()\n"
        "    shadow = 'read'\n"
        "except OSError as error:\n"
        "    shadow = type(error).__name__\n"
        "os.write(3, json.dumps([present, shadow]).encode())\n"
    )
    result = run(program, {}, FAST)
    assert json.loads(result.payload) == [[], "PermissionError"]


def test_nothing_outside_scratch_is_writable() -> None:
    program = (
        "import json, os\n"
        "writable = []\n"
        "for directory in ['/', '/usr', '/sandbox', '/dev', '/dev/shm', '/dev/mqueue', '/root',"
        " '/proc', '/etc', '/var/tmp', '/run', '/opt/loopgrade/init', '/opt/loopgrade/venv',"
        " os.path.dirname(os.__file__)]:\n"
        "    try:\n"
        "        open(os.path.join(directory, 'x'), 'w').close()\n"
        "        writable.append(directory)\n"
        "    except OSError:\n"
        "        pass\n"
        "for path in ['/etc/hosts', '/etc/hostname', '/etc/resolv.conf']:\n"
        "    try:\n"
        "        open(path, 'a').close()\n"
        "        writable.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('/tmp/x', 'w').close()\n"
        "os.write(3, json.dumps(writable).encode())\n"
    )
    result = run(program, {}, FAST)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.payload) == []


def test_no_privileges_no_new_namespaces_and_a_non_root_user() -> None:
    program = (
        "import ctypes, json, os\n"
        "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "unshared = [libc.unshare(flag) for flag in (0x10000000, 0x20000, 0x40000000)]\n"
        "os.write(3, json.dumps([os.getuid(), os.getgid(), os.getgroups(),"
        " status['CapEff'].strip(), status['CapBnd'].strip(), status['NoNewPrivs'].strip(),"
        " unshared]).encode())\n"
    )  # CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET
    uid, gid, groups, effective, bounding, no_new_privs, unshared = json.loads(
        run(program, {}, FAST).payload
    )
    assert (uid, gid) == (SANDBOX_USER, SANDBOX_USER)
    assert set(groups) <= {SANDBOX_USER}  # the engine lists the primary group again
    assert int(effective, 16) == 0 and int(bounding, 16) == 0
    assert no_new_privs == "1"
    assert unshared == [-1, -1, -1]


def test_the_servers_environment_does_not_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    token = f"token-{uuid.uuid4().hex}"
    monkeypatch.setenv("LOOPGRADE_TEST_SECRET", token)
    program = (
        "import glob, json, os\n"
        "blobs = []\n"
        "for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n"
        "    try:\n"
        "        blobs.append(open(path, 'rb').read().decode(errors='replace'))\n"
        "    except OSError:\n"
        "        pass\n"
        "os.write(3, json.dumps([dict(os.environ), blobs]).encode())\n"
    )
    environment, blobs = json.loads(run(program, {}, FAST).payload)
    assert environment == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    assert blobs
    assert not any(token in blob for blob in blobs)


def test_the_init_cannot_be_killed_or_read_by_the_program() -> None:
    program = (
        "import json, os, signal, time\n"
        "outcomes = {}\n"
        "for name, action in [('kill-1', lambda: os.kill(1, signal.SIGKILL)),"
        " ('kill-parent', lambda: os.kill(os.getppid(), signal.SIGKILL)),"
        " ('kill-all', lambda: os.kill(-1, signal.SIGKILL)),"
        " ('term-1', lambda: os.kill(1, signal.SIGTERM)),"
        " ('read-fds', lambda: os.listdir('/proc/1/fd')),"
        " ('open-stdout', lambda: open('/proc/1/fd/1', 'wb'))]:\n"
        "    try:\n"
        "        action()\n"
        "        outcomes[name] = 'done'\n"
        "    except OSError as error:\n"
        "        outcomes[name] = type(error).__name__\n"
        "time.sleep(0.3)\n"
        "os.write(3, json.dumps([os.getppid(), outcomes]).encode())\n"
    )
    result = run(program, {}, FAST)
    assert result.exit_code == 0, result.stderr
    parent, outcomes = json.loads(result.payload)
    assert parent == 1
    # The signals are sent, and the init (PID 1 of the namespace) ignores them.
    assert outcomes["read-fds"] == outcomes["open-stdout"] == "PermissionError"


def test_scratch_is_private_to_a_run_and_size_capped() -> None:
    first = run("open('/tmp/left-behind', 'w').write('x')", {}, FAST)
    assert first.exit_code == 0
    second = run(
        "import errno, os\n"
        "os.write(3, str(os.path.exists('/tmp/left-behind')).encode())\n"
        "try:\n"
        "    with open('/tmp/fill', 'wb') as file:\n"
        "        for _ in range(64):\n"
        "            file.write(b'x' * (64 << 10))\n"
        "except OSError as error:\n"
        "    print(errno.errorcode[error.errno])\n",
        {},
        fast(scratch_bytes=1 << 20, file_size_bytes=16 << 20),
    )
    assert second.payload == b"False"
    assert second.stdout == b"ENOSPC\n"
    assert not second.file_size_exceeded


def test_runs_in_parallel_are_separate(start_run: Callable[..., Future[RunResult]]) -> None:
    program = (
        "import os, time\n"
        "name = open('/sandbox/name').read()\n"
        "open('/tmp/mine', 'w').write(name)\n"
        "time.sleep(1.0)\n"
        "seen = sorted(p for p in os.listdir('/proc') if p.isdigit())\n"
        "os.write(3, (open('/tmp/mine').read() + ' ' + ','.join(seen)).encode())\n"
    )
    futures = [start_run(program, FAST, {"name": name.encode()}) for name in ("first", "second")]
    results = [future.result() for future in futures]
    assert [result.exit_code for result in results] == [0, 0]
    (first, first_pids), (second, second_pids) = (r.payload.decode().split() for r in results)
    assert (first, second) == ("first", "second")
    # Each sees two processes: its own container's init (PID 1), and itself.
    for pids in (first_pids, second_pids):
        assert len(pids.split(",")) == 2 and "1" in pids.split(","), pids


# -- the worker guards itself ------------------------------------------------------------------


def test_a_hung_teardown_is_reported_and_the_container_still_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import docker.api
    import requests

    def hung(*args: object, **kwargs: object) -> None:
        raise requests.exceptions.ReadTimeout("the engine did not answer in time")

    monkeypatch.setattr(docker.api.APIClient, "remove_container", hung)
    with pytest.raises(SandboxError, match="did not go away"):
        run("import time; time.sleep(60)", {}, fast(wall_timeout_seconds=1.0))
    # It was killed before the removal was asked for, and the engine removes what it kills.
    deadline = time.monotonic() + 10
    while sandbox_containers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_containers() == []


def test_the_stage_directory_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGRADE_DOCKER_STAGE_DIR", str(tmp_path))
    assert run("import os; os.write(3, b'ok')", {"a.txt": b"a"}, FAST).payload == b"ok"
    assert list(tmp_path.iterdir()) == []


# -- selecting the backend ---------------------------------------------------------------------


def test_no_engine_refuses_to_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    trace = tmp_path / "trace"
    with pytest.raises(SandboxUnavailable, match="no Docker engine answers"):
        run(f"open({str(trace)!r}, 'w').write('ran')\n", {}, FAST)
    assert not trace.exists()


def test_a_missing_image_refuses_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGRADE_DOCKER_IMAGE", "loopgrade-no-such-image:never")
    with pytest.raises(SandboxUnavailable, match=r"scripts/build-images\.sh"):
        run("print(1)", {}, FAST)


def test_an_unknown_runtime_or_a_root_user_refuses_to_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPGRADE_DOCKER_RUNTIME", "no-such-runtime")
    with pytest.raises(SandboxUnavailable, match="not a runtime of the Docker engine"):
        run("print(1)", {}, FAST)
    monkeypatch.delenv("LOOPGRADE_DOCKER_RUNTIME")
    monkeypatch.setenv("LOOPGRADE_DOCKER_USER", "0:0")
    with pytest.raises(SandboxUnavailable, match="never root"):
        run("print(1)", {}, FAST)


def test_auto_falls_back_to_docker_and_refuses_with_neither(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOOPGRADE_SANDBOX", "auto")
    monkeypatch.setenv("LOOPGRADE_BWRAP", str(tmp_path / "no-bwrap"))
    assert sandbox.backend_name() == "docker"
    assert run("import os; os.write(3, b'ok')", {}, FAST).payload == b"ok"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(SandboxUnavailable, match="no sandbox backend works") as refused:
        sandbox.check_available()
    assert "apt-get install bubblewrap" in str(refused.value)
    assert "no Docker engine answers" in str(refused.value)


# -- gVisor ------------------------------------------------------------------------------------


@pytest.fixture
def gvisor(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    reason = docker_unavailable_reason(docker_backend.GVISOR_RUNTIME)
    if reason:
        pytest.skip(f"no gVisor runtime on this engine: {reason}")
    monkeypatch.setenv("LOOPGRADE_DOCKER_RUNTIME", docker_backend.GVISOR_RUNTIME)
    yield


@pytest.mark.usefixtures("gvisor")
def test_gvisor_runs_the_program_in_its_own_kernel() -> None:
    program = (
        "import json, os, sys\n"
        "print('out')\n"
        "print('err', file=sys.stderr)\n"
        "kernel = open('/proc/version').read()\n"
        "os.write(3, json.dumps([os.getuid(), kernel]).encode())\n"
    )
    result = run(program, {}, FAST)
    assert result.exit_code == 0, result.stderr
    uid, kernel = json.loads(result.payload)
    assert uid == SANDBOX_USER
    assert kernel != Path("/proc/version").read_text()  # gVisor's, not the host's
    assert (result.stdout, result.stderr) == (b"out\n", b"err\n")


@pytest.mark.usefixtures("gvisor")
@pytest.mark.parametrize(
    ("program", "limits", "flag"),
    [
        ("import time; time.sleep(60)", fast(wall_timeout_seconds=2.0), "timed_out"),
        ("while True: pass", fast(cpu_seconds=1.0), "cpu_time_exceeded"),
        (
            "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n",
            fast(memory_bytes=128 << 20),
            "memory_exceeded",
        ),
        (
            "import sys\nwhile True:\n    print('o' * 999)\n",
            fast(output_bytes=10_000),
            "output_truncated",
        ),
        ("open('big', 'wb').write(b'x' * (2 << 20))\n", FAST, "file_size_exceeded"),
    ],
    ids=["wall", "cpu", "memory", "output", "file-size"],
)
def test_gvisor_limits(program: str, limits: sandbox.Limits, flag: str) -> None:
    result = run(program, {}, limits)
    assert getattr(result, flag), result
    assert sandbox_containers() == []


@pytest.mark.usefixtures("gvisor")
def test_gvisor_holds_a_fork_bomb_to_its_process_limit() -> None:
    # Under gVisor the cap is RLIMIT_NPROC in the sandbox's own kernel: forks fail, the program
    # spins on, and the CPU limit ends it (the host cannot see the failed forks to flag them).
    program = (
        "import os\n"
        "children = 0\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            import time; time.sleep(60)\n"
        "        children += 1\n"
        "    except OSError:\n"
        "        os.write(3, str(children).encode())\n"
        "        break\n"
    )
    result = run(program, {}, fast(max_processes=16))
    assert result.exit_code == 0, result
    assert 0 < int(result.payload) <= 16
    assert sandbox_containers() == []


@pytest.mark.usefixtures("gvisor")
@pytest.mark.parametrize(
    ("later_limits", "limit_hit"),
    [
        # Its tasks are the sandbox kernel's: no wait is read, so the unwaited budget stops
        # nothing (the 3 s sleep ends) ...
        ({"later_unwaited_wall_seconds": 0.5}, None),
        # ... and the plain wall budget is the one that holds.
        ({"later_unwaited_wall_seconds": 0.5, "later_wall_timeout_seconds": 1.0}, "timed_out"),
    ],
    ids=["unwaited", "backstop"],
)
def test_gvisor_holds_the_part_after_the_request_to_its_plain_wall_budget(
    later_limits: dict[str, float], limit_hit: str | None
) -> None:
    code = "import os, sys, time\nos.write(5, b'?')\nsys.stdin.buffer.read()\ntime.sleep(3)\n"
    limits = fast(
        **{"wall_timeout_seconds": 60.0, "later_wall_timeout_seconds": 30.0, **later_limits}
    )
    before = run(code, {}, limits, b"later")
    after = before.after_request
    assert after is not None
    assert (after.limit_hit, after.waited_seconds) == (limit_hit, None)
    assert sandbox_containers() == []


@pytest.mark.usefixtures("gvisor")
def test_gvisor_holds_the_part_after_the_request_to_the_run_s_cpu_cap_not_its_own() -> None:
    # The container's CPU is the sandbox kernel's too, in lumps of a second or two: a part that
    # spins past its own cap (which stops it under runc: tests/sandbox/test_later_input.py) ends
    # as it likes, and the run's whole CPU cap still holds it.
    spin = "end = time.process_time() + {}\nwhile time.process_time() < end: pass\n"
    code = "import os, sys, time\nos.write(5, b'?')\nsys.stdin.buffer.read()\n" + spin
    limits = fast(cpu_seconds=3.0, later_cpu_seconds=0.2, wall_timeout_seconds=60.0)
    spun = run(code.format(0.6), {}, limits, b"later").after_request
    assert spun is not None and spun.limit_hit is None, spun
    forever = run(code.format(60), {}, limits, b"later").after_request
    assert forever is not None and forever.limit_hit == "cpu_time_exceeded", forever
    assert sandbox_containers() == []


@pytest.mark.usefixtures("gvisor")
def test_gvisor_no_network_and_no_host_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        program = (
            "import json, os, socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    outcome = 'connected'\n"
            "except OSError as error:\n"
            "    outcome = type(error).__name__\n"
            f"os.write(3, json.dumps([outcome, os.path.exists({str(secret)!r})]).encode())\n"
        )
        result = run(program, {}, FAST)
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.accept()
    outcome, secret_seen = json.loads(result.payload)
    assert outcome != "connected" and secret_seen is False


def test_it_runs_as_the_configured_user_never_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGRADE_DOCKER_USER", "12345:12345")
    result = run("import os; os.write(3, str(os.getuid()).encode())", {}, FAST)
    assert result.payload == b"12345"
    assert os.geteuid() != 12345
