"""How much of its hidden budget each exercise's solution uses, per backend.

    .venv/bin/python bench/hidden_budget.py [--runs 3] [--backends bwrap bwrap-pool docker
        docker-pool docker+runsc]

Each run grades the solution's visible cases, then its hidden ones, in one sandbox, as a
grading does (`graders.grading._run`). Prints, per exercise, the budget (docs/security.md#the-
time-a-grading-takes) and the largest CPU, wall and unwaited wall of the part after the request
over the runs, and how many runs a cap stopped; then the largest share of a budget that holds
the part (under gVisor its wall backstop alone). A backend this host lacks is reported and
skipped.
"""

from __future__ import annotations

import argparse
import os

import sandbox
from graders import grading
from graders.exercises import list_exercises
from sandbox import SandboxUnavailable


def measure(backend: str, runs: int) -> None:
    name, _, mode = backend.partition("-")
    kind, _, runtime = name.partition("+")
    if runtime:
        os.environ["LOOPGRADE_DOCKER_RUNTIME"] = runtime
    else:
        os.environ.pop("LOOPGRADE_DOCKER_RUNTIME", None)
    pool = grading.POOL_PROGRAM if mode == "pool" else None
    try:
        runner = sandbox.open_runner(kind, pool=pool, pool_size=1)
    except SandboxUnavailable as exc:
        print(f"{backend}: unavailable ({exc})")
        return
    print(f"{backend}:")
    worst = 0.0
    try:
        for exercise in list_exercises():
            groups = grading.case_groups(exercise)
            if len(groups) < 2:
                continue  # no hidden cases
            visible, hidden = groups
            budget = grading.hidden_budget(exercise)
            limits = budget.limits(grading.GRADING_LIMITS)
            cpu = wall = unwaited = 0.0
            stopped = 0
            for _ in range(runs):
                result = grading._run(
                    runner, exercise, exercise.solution_code, visible, hidden, limits
                )
                part = result.after_request
                assert part is not None, (
                    f"{exercise.id}: the solution never asked for its hidden cases"
                )
                stopped += part.limit_hit is not None
                cpu = max(cpu, part.cpu_seconds)
                wall = max(wall, part.wall_seconds)
                unwaited = max(unwaited, part.wall_seconds - (part.waited_seconds or 0.0))
            if runtime:  # gVisor: its wall backstop alone holds the part (docs/security.md)
                worst = max(worst, wall / budget.wall_seconds)
            else:
                worst = max(
                    worst, cpu / budget.cpu_seconds, unwaited / budget.unwaited_wall_seconds
                )
            print(
                f"  {exercise.id:26s} budget {budget.cpu_seconds:.3f} s  cpu {cpu:.3f}  "
                f"wall {wall:.3f}  unwaited {unwaited:.3f}  stopped {stopped} of {runs}"
            )
    finally:
        runner.close()
    print(f"  the largest share of a budget: {worst:.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--backends", nargs="+", default=["bwrap", "bwrap-pool", "docker", "docker+runsc"]
    )
    args = parser.parse_args()
    for backend in args.backends:
        measure(backend, args.runs)


if __name__ == "__main__":
    main()
