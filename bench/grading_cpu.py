"""CPU seconds of one warm grading, split into the server's side and the sandbox's side.

    .venv/bin/python bench/grading_cpu.py [-n 60] [--unit 1] [--profile 25]
    .venv/bin/python bench/grading_cpu.py --unit 1 --against f86d8cf [--rounds 5]

Opens the warm pool as the server does (`sandbox.open_runner`, `graders.grading.POOL_PROGRAM`),
computes every exercise's trusted trajectories (cached once per exercise version, as on a
server that has run a while), then grades, one after another, the mixed load (every exercise's
solution and known bugs, and failing submissions) twice:

- first: each submission once; none has been judged before (what a new bug costs);
- again: `-n` more, cycling through the same ones; their judgments are cached (a bug that
  other learners made before, to the bit: the common case in a class, the only case here);

and prints, per grading of each pass:

- server: this process's user + system CPU (`getrusage`), which is the grader's share: the
  sandbox round trips' supervision, reading the trace, judging, diagnosis, the report;
- sandbox: what the pool's slot cgroups count (cpuacct): the clone of the zygote, the child's
  namespaces, mounts, seccomp, the harness and the learner's code, its exit;
- faults: minor page faults of the zygote and its reaped children per grading (from
  /proc/PID/stat): a child's first write to each page it shares with its zygote is a
  copy-on-write fault, most of a run's CPU after the clone. A count, so less moved by other
  work on the machine than CPU time.

and, with `--two-runs`, the same `-n` submissions as runs only (no judging), side by side: one
run each, the hidden cases given on request (what a grading makes), against two runs each,
visible and hidden cases apart (what a grading made before both shared one run).

`--unit N` grades the exercises of the Nth unit only (this tree's list). `--against REV` measures
this tree and that revision side by side: the revision is extracted (`git archive`) with this
tree's bench/ copied over it, and each tree is measured in a fresh process in turn, `--rounds`
times, alternating (the machine's speed drifts by a third within minutes); it prints the
medians and the change.

CPU time, not wall time: the machine may be shared. `--profile N` prints the N costliest
functions of the server side (cProfile, cumulative), over a third pass of the repeats.
It needs a root server (the pool's cgroups).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import sandbox  # noqa: E402
from bench.grade_load import (  # noqa: E402  (the same load as through the server)
    mixed_load,
    own_cpu_seconds,
)
from graders import grade  # noqa: E402
from graders.exercises import get_exercise, list_exercises  # noqa: E402
from graders.grading import (  # noqa: E402
    GRADING_LIMITS,
    POOL_PROGRAM,
    _run,  # a grading's sandboxed run, without the judging
    case_groups,
    trusted_trajectories,
)


def zygote_faults(zygote_pid: int) -> int:
    """Minor faults of a slot's zygote and of the jobs it has reaped."""
    fields = Path(f"/proc/{zygote_pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[7]) + int(fields[8])  # minflt, cminflt


def run_cases(runner: sandbox.Runner, exercise_id: str, code: str, apart: bool) -> None:
    """Run a submission's cases as grading does (one run, the hidden cases on request), or in
    two runs, visible and hidden apart."""
    exercise = get_exercise(exercise_id)
    first, *later = case_groups(exercise)
    if apart:
        for cases in (first, *later):
            _run(runner, exercise, code, cases, None, GRADING_LIMITS)
    else:
        _run(runner, exercise, code, first, later[0] if later else None, GRADING_LIMITS)


FIGURES = ("server", "sandbox", "total", "faults")


def unit_exercises(unit: int) -> list[str]:
    """The ids of this tree's Nth unit (counted from 1, in the exercise list's order)."""
    units: dict[str, list[str]] = {}
    for exercise in list_exercises():
        units.setdefault(exercise.unit, []).append(exercise.id)
    if not 1 <= unit <= len(units):
        sys.exit(f"--unit {unit}: this tree has {len(units)} units")
    return list(units.values())[unit - 1]


def measure_here(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Grade the load in this process; print a line per pass; its figures per pass."""
    runner = sandbox.open_runner("bwrap", pool=POOL_PROGRAM, pool_size=1)
    if not isinstance(runner, sandbox.PoolRunner):
        sys.exit("the warm pool did not start (see the log): it needs a root server")
    slots = runner.pool.slots
    figures: dict[str, dict[str, float]] = {}
    lines = sys.stderr if args.json else sys.stdout  # with --json, stdout is the figures'

    def grade_it(exercise: str, code: str) -> object:
        return grade(exercise, code, runner=runner)

    def measure(
        what: str, gradings: list[tuple[str, str]], work: Callable[[str, str], object] = grade_it
    ) -> None:
        server_before = own_cpu_seconds()
        sandbox_before = sum(slot.counters()[0] for slot in slots)
        faults_before = sum(zygote_faults(slot.zygote_pid) for slot in slots)
        wall_before = time.monotonic()
        for exercise, code in gradings:
            work(exercise, code)
        wall = time.monotonic() - wall_before
        server = own_cpu_seconds() - server_before
        in_sandbox = sum(slot.counters()[0] for slot in slots) - sandbox_before
        faults = sum(zygote_faults(slot.zygote_pid) for slot in slots) - faults_before
        count = len(gradings)
        figures[what] = {
            "server": server / count,
            "sandbox": in_sandbox / count,
            "total": (server + in_sandbox) / count,
            "faults": faults / count,
        }
        print(f"{what:8} {count:4} gradings {wall:5.1f} s wall   CPU s per grading: server "
              f"{server / count:.4f}  sandbox {in_sandbox / count:.4f}  "
              f"total {(server + in_sandbox) / count:.4f}   "
              f"faults {faults / count:.0f}", file=lines)  # fmt: skip

    try:
        load = [(e, code) for e, code in mixed_load() if not args.exercises or e in args.exercises]
        for exercise_id in sorted({exercise for exercise, _ in load}):
            trusted_trajectories(get_exercise(exercise_id))
        measure("first", load)
        measured = list(itertools.islice(itertools.cycle(load), args.n))
        measure("again", measured)
        if args.two_runs:
            measure("one run", measured, lambda e, c: run_cases(runner, e, c, apart=False))
            measure("two runs", measured, lambda e, c: run_cases(runner, e, c, apart=True))
        if args.profile:
            profiler = cProfile.Profile(timer=time.process_time)
            profiler.enable()
            for exercise, code in measured:
                grade(exercise, code, runner=runner)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
    finally:
        runner.close()
    return figures


def compare(args: argparse.Namespace) -> None:
    """This tree and `args.against`, each measured in its own fresh processes, in turns."""
    with tempfile.TemporaryDirectory(prefix="grading-cpu-") as directory:
        other = Path(directory)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.against], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(other)], input=archive.stdout, check=True)
        # The same measurement and load in both: only the graders differ.
        shutil.copytree(REPO / "bench", other / "bench", dirs_exist_ok=True)
        trees = {"this tree": REPO, args.against: other}
        runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in trees}
        for round_number in range(1, args.rounds + 1):
            for name, tree in trees.items():
                command = [sys.executable, str(tree / "bench" / "grading_cpu.py"), "--json"]
                command += ["-n", str(args.n), "--exercises", *args.exercises]
                measured = subprocess.run(command, cwd=tree, capture_output=True, text=True)
                if measured.returncode:
                    sys.exit(f"{name}: {command} failed:\n{measured.stderr[-3000:]}")
                runs[name].append(json.loads(measured.stdout.splitlines()[-1]))
                first, again = (runs[name][-1][what] for what in ("first", "again"))
                print(f"round {round_number}/{args.rounds} {name:>12}: total first "
                      f"{first['total']:.4f} again {again['total']:.4f}, sandbox first "
                      f"{first['sandbox']:.4f} again {again['sandbox']:.4f}",
                      file=sys.stderr, flush=True)  # fmt: skip
    print(f"medians of {args.rounds} alternating runs per tree; CPU s per grading, faults a count")
    print(f"{'':18}{'this tree':>12}{args.against:>12}{'change':>9}")
    for what in ("first", "again"):
        for figure in FIGURES:
            ours, theirs = (
                statistics.median(run[what][figure] for run in runs[name]) for name in trees
            )
            places = 0 if figure == "faults" else 4
            print(f"{what:6} {figure:11}{ours:>12.{places}f}{theirs:>12.{places}f}"
                  f"{100 * (ours / theirs - 1):>+8.0f}%")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=60, help="gradings measured (default 60)")
    parser.add_argument("--unit", type=int, help="only the exercises of the Nth unit")
    parser.add_argument("--against", metavar="REV", help="also that revision, side by side")
    parser.add_argument("--rounds", type=int, default=5, help="runs per tree with --against")
    parser.add_argument("--profile", type=int, default=0, help="print the N costliest functions")
    parser.add_argument(
        "--two-runs", action="store_true", help="also: one run a submission against two"
    )
    # A run for --against: the exercises by id (the unit as this tree reads it), figures as JSON.
    parser.add_argument("--exercises", nargs="+", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.unit is not None:
        args.exercises = unit_exercises(args.unit)
    if args.against:
        compare(args)
        return
    figures = measure_here(args)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
