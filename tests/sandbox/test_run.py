"""The basic contract of run(): what goes in, what comes back."""

from __future__ import annotations

import json
import os
import signal
import uuid

import pytest

from sandbox import Limits, run
from tests.sandbox.conftest import FAST, fast


def test_payload_comes_from_fd_3_and_stdout_stderr_come_separately() -> None:
    program = (
        "import os, sys\n"
        "print('to stdout')\n"
        "print('to stderr', file=sys.stderr)\n"
        "os.write(3, b'the payload')\n"
    )
    result = run(program, {}, FAST)
    assert result.exit_code == 0
    assert result.signal is None
    assert result.payload == b"the payload"
    assert result.stdout == b"to stdout\n"
    assert result.stderr == b"to stderr\n"
    assert result.limit_hit is None
    assert 0 < result.wall_seconds < FAST.wall_timeout_seconds
    assert result.cpu_seconds > 0


def test_prints_never_reach_the_payload() -> None:
    program = (
        "import os, subprocess, sys\n"
        "print('forged payload')\n"
        "sys.stdout.flush()\n"
        "os.write(1, b'forged payload 1')\n"
        "os.write(2, b'forged payload 2')\n"
        "subprocess.run(['/bin/echo', 'forged payload 3'])\n"
    )
    result = run(program, {}, FAST)
    assert result.exit_code == 0
    assert result.payload == b""
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


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "/etc/passwd", ".hidden", "main.py", "a\0b"]
)
def test_an_input_name_that_is_not_a_plain_file_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="input name"):
        run("print(1)", {name: b"x"}, FAST)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"wall_timeout_seconds": 0}, ValueError),
        ({"cpu_seconds": -1.0}, ValueError),
        ({"startup_cpu_seconds": float("nan")}, ValueError),
        ({"wall_timeout_seconds": float("inf")}, ValueError),
        ({"memory_bytes": 1.5}, TypeError),
        ({"max_processes": True}, TypeError),
        ({"output_bytes": "64"}, TypeError),
    ],
)
def test_limits_check_themselves(change: dict[str, object], error: type[Exception]) -> None:
    (name,) = change
    with pytest.raises(error, match=f"Limits.{name}"):
        Limits(**change)  # type: ignore[arg-type]


def test_inputs_must_fit_the_file_size_limit() -> None:
    with pytest.raises(ValueError, match="larger than"):
        run("print(1)", {"big.bin": b"x" * (FAST.file_size_bytes + 1)}, FAST)


def test_exit_code_and_death_by_signal_are_reported() -> None:
    assert run("import sys; sys.exit(3)", {}, FAST).exit_code == 3
    crashed = run("import ctypes; ctypes.string_at(0)", {}, FAST)
    assert crashed.exit_code is None
    assert crashed.signal == signal.SIGSEGV
    assert crashed.limit_hit is None


def test_a_learner_exception_is_a_result_with_its_traceback() -> None:
    result = run("raise RuntimeError('grad is None')", {}, FAST)
    assert result.exit_code == 1
    assert b"RuntimeError: grad is None" in result.stderr
    assert result.limit_hit is None


def test_torch_imports_and_a_linear_sgd_step_runs_under_the_filter(backend: str) -> None:
    program = (
        "import json, os, torch\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "x, y = torch.randn(16, 4), torch.randn(16, 1)\n"
        "losses = []\n"
        "for _ in range(5):\n"
        "    opt.zero_grad()\n"
        "    loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    losses.append(loss.item())\n"
        "threads, version = torch.get_num_threads(), torch.__version__\n"
        "trace = {'losses': losses, 'threads': threads, 'version': version}\n"
        "os.write(3, json.dumps(trace).encode())\n"
    )
    result = run(program, {}, fast(wall_timeout_seconds=30, cpu_seconds=30, memory_bytes=1 << 30))
    assert result.exit_code == 0, result.stderr
    trace = json.loads(result.payload)
    assert trace["losses"][-1] < trace["losses"][0]
    assert trace["threads"] == 1  # OMP_NUM_THREADS=1
    assert trace["version"] == "2.13.0+cpu"
    assert result.peak_memory_bytes is None or result.peak_memory_bytes > 50 << 20


@pytest.mark.parametrize("start", ["subprocess", "fork"])
def test_the_run_ends_when_the_program_does_and_what_it_left_dies(backend: str, start: str) -> None:
    """A child that would sleep for minutes neither holds the run open nor outlives it."""
    marker = f"left-behind-{uuid.uuid4().hex}"
    sleeper = f"[sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}]"
    program = (
        "import os, subprocess, sys\n"
        + (
            f"subprocess.Popen({sleeper})\n"
            if start == "subprocess"
            else f"if os.fork() == 0:\n    os.setsid()\n    os.execv(sys.executable, {sleeper})\n"
        )
        + "os.write(3, b'main')\n"
    )
    result = run(program, {}, FAST)  # its wall clock is far below the children's sleep
    assert result.payload == b"main", result.stderr
    assert result.limit_hit is None
    assert result.exit_code == 0
    left = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    left.append(entry)
        except OSError:
            continue
    assert left == []
