"""RunResults as a sandbox returns them, made in this process: for tests of what the grader does
with whatever comes back (grading.grade_runs), every field of which is the learner's to choose.

`harness_result` runs the real harness here, unsandboxed, on test code only.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from graders import harness
from graders.exercise import CaseSpec, Exercise
from graders.kinds import kind_of
from sandbox import RunResult

CLEAN = RunResult(
    exit_code=0,
    signal=None,
    timed_out=False,
    cpu_time_exceeded=False,
    memory_exceeded=False,
    process_limit_exceeded=False,
    file_size_exceeded=False,
    open_files_exceeded=False,
    output_truncated=False,
    payload_truncated=False,
    wall_seconds=1.0,
    cpu_seconds=1.0,
    peak_memory_bytes=None,
    payload=b"",
    stdout=b"",
    stderr=b"",
)


def result(**fields: Any) -> RunResult:
    return dataclasses.replace(CLEAN, **fields)


def groups(exercise: Exercise) -> list[list[CaseSpec]]:
    """The exercise's cases as grade() runs them: the visible group, then the hidden one."""
    return [[c for c in exercise.cases if c.hidden == hidden] for hidden in (False, True)]


def harness_document(exercise: Exercise, source: str, cases: list[CaseSpec]) -> dict[str, Any]:
    specs = [c.harness_spec() for c in cases]
    return harness.run_submission(source, kind_of(exercise).record, exercise.entry_point, specs)


def harness_result(
    exercise: Exercise, source: str, cases: list[CaseSpec], **fields: Any
) -> RunResult:
    payload = json.dumps(harness_document(exercise, source, cases)).encode()
    return result(payload=payload, **fields)
