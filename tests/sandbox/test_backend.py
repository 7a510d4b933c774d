"""Backend selection, refusing to run unconfined, the debugging CLI, and a non-root server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyseccomp
import pytest

import sandbox
from sandbox import SandboxError, SandboxUnavailable, bwrap, run
from tests.sandbox.conftest import FAST

REPO = Path(__file__).resolve().parents[2]


def program_leaving_a_trace(trace: Path) -> str:
    """A program that, if it ran unconfined, would leave `trace` on the host."""
    return f"open({str(trace)!r}, 'w').write('ran')\n"


def test_the_backend_here_is_bwrap() -> None:
    sandbox.check_available()
    assert sandbox.backend_name() == "bwrap"


def test_missing_bwrap_refuses_to_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOOPGRADE_SANDBOX", "bwrap")  # auto would fall back to docker
    monkeypatch.setenv("LOOPGRADE_BWRAP", str(tmp_path / "nowhere" / "bwrap"))
    trace = tmp_path / "trace"
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        run(program_leaving_a_trace(trace), {}, FAST)
    with pytest.raises(SandboxUnavailable):
        sandbox.check_available()
    assert not trace.exists()


def test_no_bwrap_on_path_refuses_to_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LOOPGRADE_BWRAP", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("LOOPGRADE_SANDBOX", "bwrap")
    trace = tmp_path / "trace"
    with pytest.raises(SandboxUnavailable, match="no `bwrap` on PATH"):
        run(program_leaving_a_trace(trace), {}, FAST)
    assert not trace.exists()


def test_a_bwrap_that_cannot_make_a_sandbox_refuses_to_run(
    monkeypatch: pytest.MonkeyPatch, shared_dir: Path
) -> None:
    fake = shared_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LOOPGRADE_SANDBOX", "bwrap")
    monkeypatch.setenv("LOOPGRADE_BWRAP", str(fake))
    trace = shared_dir / "trace"
    with pytest.raises(SandboxUnavailable, match="uid map: Permission denied"):
        run(program_leaving_a_trace(trace), {}, FAST)
    assert not trace.exists()


def test_bubblewraps_pid_is_read_and_a_missing_one_says_whether_bubblewrap_ended() -> None:
    started_r, started_w = os.pipe()
    os.write(started_w, json.dumps({"child-pid": 4242}).encode())
    os.close(started_w)
    ended_r, ended_w = os.pipe()
    os.close(ended_w)
    silent_r, silent_w = os.pipe()  # held open: bubblewrap still setting up
    try:
        assert bwrap.read_child_pid(started_r, 10) == 4242
        with pytest.raises(SandboxError, match=r"did not start \(it ended first\)"):
            bwrap.read_child_pid(ended_r, 10)
        with pytest.raises(SandboxError, match=r"did not start \(no pid within 0 s\)"):
            bwrap.read_child_pid(silent_r, 0.1)
    finally:
        for fd in (started_r, ended_r, silent_r, silent_w):
            os.close(fd)


def test_a_host_with_neither_backend_refuses_to_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOOPGRADE_SANDBOX", "auto")
    monkeypatch.setenv("LOOPGRADE_BWRAP", str(tmp_path / "nowhere" / "bwrap"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    trace = tmp_path / "trace"
    with pytest.raises(SandboxUnavailable, match="no sandbox backend works") as refused:
        run(program_leaving_a_trace(trace), {}, FAST)
    assert "bwrap: bubblewrap is not installed" in str(refused.value)
    assert "docker: no Docker engine answers" in str(refused.value)
    assert not trace.exists()


def test_an_unknown_backend_setting_refuses_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGRADE_SANDBOX", "chroot")
    with pytest.raises(SandboxUnavailable, match="LOOPGRADE_SANDBOX='chroot'"):
        run("print(1)", {}, FAST)


def test_the_cli_runs_a_file_and_prints_the_result(tmp_path: Path) -> None:
    program = tmp_path / "main.py"
    program.write_text(
        "import os\nprint('hi')\nos.write(3, open('/sandbox/seed.txt', 'rb').read())\n"
    )
    seed = tmp_path / "seed.txt"
    seed.write_text("seed 7")
    completed = subprocess.run(
        [sys.executable, "-m", "sandbox", "run", str(program), "--input", f"seed.txt={seed}",
         "--wall-timeout", "5"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "exit_code: 0" in completed.stdout
    assert "payload: 6 bytes\n  | seed 7" in completed.stdout
    assert "stdout: 3 bytes\n  | hi" in completed.stdout
    assert "limit_hit: None" in completed.stdout


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PYTHON),
    reason="needs root, setpriv and a system python to act as an operator's unprivileged server",
)
def test_a_server_that_is_not_root_runs_sandboxes_as_itself(shared_dir: Path) -> None:
    # The venv's interpreter lives under /root here, so the server is the system python, with a
    # copy of the one dependency the sandbox package has (pyseccomp is a single module).
    library = shared_dir / "lib"
    library.mkdir(mode=0o755)
    shutil.copy(pyseccomp.__file__, library / "pyseccomp.py")
    (library / "pyseccomp.py").chmod(0o644)
    programs = {
        "ok": "import os\nos.write(3, str(os.getuid()).encode())\n",
        "fork-bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
        "        pass\n",
    }
    outputs = {}
    for name, source in programs.items():
        path = shared_dir / f"{name}.py"
        path.write_text(source)
        path.chmod(0o644)
        outputs[name] = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             SYSTEM_PYTHON, "-m", "sandbox", "run", str(path), "--max-processes", "16",
             "--wall-timeout", "10"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{library}"},
        )  # fmt: skip
    assert "exit_code: 0" in outputs["ok"].stdout, outputs["ok"].stderr
    assert "  | 65534" in outputs["ok"].stdout
    assert "process_limit_exceeded: True" in outputs["fork-bomb"].stdout, outputs["fork-bomb"]
    assert "timed_out: False" in outputs["fork-bomb"].stdout
