"""CPU seconds check-exercises spends per exercise, without and with the reference's mutants.

    python bench/check_exercises.py

Process CPU time (not wall time: the machine is shared), after one warm-up pass that fills the
trusted-trajectory caches both columns use. "declared" is the reference, starter and declared
bugs; "mutants" adds every mutant of the reference (graders/mutation.py), judged and diagnosed.
"""

from __future__ import annotations

import time

from graders.exercises import list_exercises
from graders.mutation import reference_mutants
from graders.proving import judge_mutant, soundness


def main() -> None:
    exercises = list_exercises()
    for exercise in exercises:
        soundness(exercise)  # warm-up: trusted trajectories, torch's first calls
    print(f"{'exercise':<26}{'mutants':>8}{'declared s':>12}{'mutants s':>11}{'total s':>9}")
    totals = [0.0, 0.0]
    for exercise in exercises:
        start = time.process_time()
        found = soundness(exercise)
        total = time.process_time() - start
        start = time.process_time()
        for mutant in reference_mutants(exercise):
            judge_mutant(exercise, mutant)
        mutants = time.process_time() - start
        totals[0] += total - mutants
        totals[1] += mutants
        print(
            f"{exercise.id:<26}{len(found.mutants):>8}{total - mutants:>12.2f}{mutants:>11.2f}"
            f"{total:>9.2f}"
        )
    print(f"{'all':<26}{'':>8}{totals[0]:>12.2f}{totals[1]:>11.2f}{sum(totals):>9.2f}")


if __name__ == "__main__":
    main()
