"""Cold start of one sandbox run, per backend: a trivial program and a torch SGD step.

    .venv/bin/python bench/sandbox_cold_start.py [--runs 10] [--backends bwrap docker docker+runsc]

Each run is a fresh sandbox (run() from the caller's side, the way the grader calls it), one at
a time. Prints the median and the slowest of each; a backend this host lacks is reported and
skipped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import sandbox
from sandbox import Limits, SandboxUnavailable, run

PROGRAMS = {
    "trivial": "import os\nos.write(3, b'ok')\n",
    # What a grading run pays before the learner's code: torch and the first optimizer.
    "torch-sgd-step": (
        "import os, torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loss = torch.nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))\n"
        "optimizer.zero_grad()\n"
        "loss.backward()\n"
        "optimizer.step()\n"
        "os.write(3, b'ok')\n"
    ),
}
LIMITS = Limits(wall_timeout_seconds=60.0, cpu_seconds=60.0)


def configure(backend: str) -> None:
    name, _, runtime = backend.partition("+")
    os.environ["LOOPGRADE_SANDBOX"] = name
    if runtime:
        os.environ["LOOPGRADE_DOCKER_RUNTIME"] = runtime
    else:
        os.environ.pop("LOOPGRADE_DOCKER_RUNTIME", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--backends", nargs="+", default=["bwrap", "docker", "docker+runsc"])
    args = parser.parse_args()
    for backend in args.backends:
        configure(backend)
        try:
            sandbox.check_available()
        except SandboxUnavailable as error:
            print(f"{backend}: not available here: {error}")
            continue
        for name, program in PROGRAMS.items():
            seconds = []
            for _ in range(args.runs):
                started = time.monotonic()
                result = run(program, {}, LIMITS)
                seconds.append(time.monotonic() - started)
                assert result.payload == b"ok", result
            print(
                f"{backend:14} {name:15} median {statistics.median(seconds):6.3f} s"
                f"   slowest {max(seconds):6.3f} s   ({args.runs} runs)"
            )


if __name__ == "__main__":
    main()
