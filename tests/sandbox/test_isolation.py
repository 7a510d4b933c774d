"""Learner code reaches no network, no file and no secret of the server, and no other run."""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from sandbox import RunResult, run
from tests.sandbox.conftest import (
    FAST,
    fast,
    release,
    uid_of,
    wait_for_processes,
    wait_for_release,
)

REPO = Path(__file__).resolve().parents[2]


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


@pytest.fixture
def secret_in_root() -> Iterator[Path]:
    if not os.access("/root", os.W_OK):
        pytest.skip("needs to write a file under /root")
    path = Path("/root") / f".loopgrade-test-secret-{uuid.uuid4().hex}"
    path.write_text("secret")
    yield path
    path.unlink()


def test_no_file_of_the_host_is_readable(tmp_path: Path, secret_in_root: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    paths = [
        str(secret),
        str(secret_in_root),
        "/etc/shadow",
        "/etc/passwd",
        str(REPO / "pyproject.toml"),
        str(REPO / "data"),
        "/root/.bashrc",
        "/home",
        "/work/shared",
        "/sys/fs/cgroup",
    ]
    program = (
        "import json, os\n"
        f"paths = {paths!r}\n"
        "readable = [path for path in paths if os.path.exists(path)]\n"
        "os.write(3, json.dumps(readable).encode())\n"
    )
    result = run(program, {}, FAST)
    assert json.loads(result.payload) == []


def test_nothing_outside_scratch_is_writable() -> None:
    program = (
        "import json, os\n"
        "writable = []\n"
        "for directory in ['/', '/usr', '/sandbox', '/dev', '/dev/shm', '/root', '/proc', '/etc',"
        " os.path.dirname(os.__file__)]:\n"
        "    try:\n"
        "        open(os.path.join(directory, 'x'), 'w').close()\n"
        "        writable.append(directory)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('/tmp/x', 'w').close()\n"
        "os.write(3, json.dumps(writable).encode())\n"
    )
    result = run(program, {}, FAST)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.payload) == []


def test_no_new_namespaces_can_be_made_inside() -> None:
    # Nested user namespaces would open the kernel's namespace code to learner code.
    program = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "results = [libc.unshare(flag) for flag in (0x10000000, 0x20000, 0x40000000)]\n"
        "os.write(3, str(results).encode())\n"
    )  # CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET
    assert run(program, {}, FAST).payload == b"[-1, -1, -1]"


def test_the_servers_environment_does_not_leak(monkeypatch: pytest.MonkeyPatch) -> None:
    token = f"token-{uuid.uuid4().hex}"
    monkeypatch.setenv("LOOPGRADE_TEST_SECRET", token)
    program = (
        "import glob, json, os\n"
        "blobs = []\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        "        blobs.append(open(path, 'rb').read().decode())\n"
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
        "PWD": "/tmp",  # set by bwrap
    }
    assert blobs  # /proc/1/environ at least (its own)
    assert not any(token in blob for blob in blobs)


def test_it_runs_as_an_unprivileged_uid(start_run: Callable[..., Future[RunResult]]) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    program = wait_for_release(marker) + "import os\nos.write(3, str(os.getuid()).encode())\n"
    future = start_run(program, FAST)
    (pid,) = wait_for_processes(marker, count=1)
    host_uid = uid_of(pid)
    release([pid])
    result = future.result()
    assert host_uid != 0
    assert int(result.payload) == host_uid


def test_scratch_is_private_to_a_run_and_size_capped() -> None:
    first = run("open('/tmp/left-behind', 'w').write('x')", {}, FAST)
    assert first.exit_code == 0
    second = run(
        "import errno, os\n"
        "os.write(3, str(os.path.exists('/tmp/left-behind')).encode())\n"
        "try:\n"
        "    with open('/tmp/fill', 'wb') as file:\n"
        "        for _ in range(64):\n"
        "            file.write(b'x' * (64 << 10))\n"  # 4 MiB in all
        "except OSError as error:\n"
        "    print(errno.errorcode[error.errno])\n",
        {},
        fast(scratch_bytes=1 << 20, file_size_bytes=16 << 20),
    )
    assert second.payload == b"False"
    assert second.stdout == b"ENOSPC\n"
    assert not second.file_size_exceeded


def test_runs_in_parallel_threads_are_separate(
    start_run: Callable[..., Future[RunResult]],
) -> None:
    program = (
        "import os, time\n"
        "open('/tmp/mine', 'w').write(open('/sandbox/name').read())\n"
        "time.sleep(0.5)\n"
        "os.write(3, (open('/tmp/mine').read() + ' ' + str(os.getuid())).encode())\n"
    )
    futures = [start_run(program, FAST, {"name": name.encode()}) for name in ("first", "second")]
    results = [future.result() for future in futures]
    assert [result.exit_code for result in results] == [0, 0]
    (first, first_uid), (second, second_uid) = (r.payload.decode().split() for r in results)
    assert (first, second) == ("first", "second")
    if os.geteuid() == 0:
        assert first_uid != second_uid
