"""The limits one sandbox run is held to: all of them in one frozen object."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Caps for one run. Each one, when hit, kills the whole process tree and sets its flag."""

    wall_timeout_seconds: float = 20.0
    cpu_seconds: float = 15.0
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
