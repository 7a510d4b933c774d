"""The sandbox works wherever the server's interpreter lives: a CI checkout may sit under /tmp."""

from __future__ import annotations

import shutil
import subprocess
import venv
from pathlib import Path

import pyseccomp

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """
import sys
sys.path.insert(0, sys.argv[1])
from sandbox import Limits, run
program = "import os, sys; os.write(3, sys.prefix.encode())"
result = run(program, {}, Limits(wall_timeout_seconds=20))
print(result.exit_code, result.payload.decode(), result.stderr.decode()[-500:])
"""


def test_a_venv_under_tmp_is_not_hidden_by_the_scratch_directory(tmp_path: Path) -> None:
    assert str(tmp_path).startswith("/tmp/"), "pytest's tmp_path is where a CI checkout may be"
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    python = environment / "bin" / "python"
    # The server's one dependency in the sandbox package: pyseccomp, a single module.
    (site_packages,) = environment.glob("lib/python3*/site-packages")
    shutil.copy(pyseccomp.__file__, site_packages / "pyseccomp.py")
    done = subprocess.run(
        [str(python), "-c", PROGRAM, str(REPO)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    exit_code, prefix, *_ = done.stdout.split(" ", 2)
    assert (exit_code, prefix.strip()) == ("0", str(environment)), done.stdout
