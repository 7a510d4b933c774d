"""The limits one sandbox run is held to: all of them in one frozen object, checked when made."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Limits:
    """Caps for one run. Each one, when hit, kills the whole process tree and sets its flag.

    CPU time, not the clock, is what the program is held to: what a busy machine changes is how
    long it waits for a core, never how much CPU it uses. A program ends its set-up by closing
    fd 4 (see sandbox/supervise.py): the CPU it used until then counts against
    `startup_cpu_seconds`, and from then on against `cpu_seconds`; a program that never does is
    held to the larger of the two. The wall clock is only a backstop against a program that
    waits (sleeps, blocks) instead of computing, so it sits well above the CPU caps.
    """

    wall_timeout_seconds: float = 60.0
    cpu_seconds: float = 10.0
    # The part of a run after its request for a later input (sandbox/supervise.py) is held to
    # these as well, from the request on: a grading's hidden cases get a budget of their own.
    later_wall_timeout_seconds: float = 60.0
    later_cpu_seconds: float = 10.0
    # ... and its wall time not spent waiting for a core: the time since the request less the
    # largest wait of any one task of the run since then (sandbox/supervise.py). Where a backend
    # cannot see its tasks from the host (gVisor), only the plain wall budget above holds.
    later_unwaited_wall_seconds: float = 60.0
    # Interpreter, `import torch`, and a trusted warm-up: about 3 s of CPU on an idle machine.
    startup_cpu_seconds: float = 20.0
    # torch alone needs ~300 MB resident; the cap is on what the run actually uses.
    memory_bytes: int = 1024 * 1024 * 1024
    max_processes: int = 32
    file_size_bytes: int = 16 * 1024 * 1024
    open_files: int = 256
    # stdout and stderr together.
    output_bytes: int = 64 * 1024
    # The result channel (fd 3): the harness's trace.
    payload_bytes: int = 4 * 1024 * 1024
    scratch_bytes: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"Limits.{field.name} must be a number, not {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"Limits.{field.name} must be a finite number > 0, not {value!r}")
            if field.type == "int" and not isinstance(value, int):
                raise TypeError(f"Limits.{field.name} must be a whole number, not {value!r}")

    @property
    def cpu_cap_before_start_seconds(self) -> float:
        """The CPU a run may use before it marks the end of its set-up."""
        return max(self.cpu_seconds, self.startup_cpu_seconds)
