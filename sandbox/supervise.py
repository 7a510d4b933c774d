"""Holding one run to its limits: the part of supervising that every backend shares.

Kept whole: what every backend shares of holding a run to its limits, so that no backend holds
one otherwise.

    supervisor = Supervisor(limits)
    supervisor.start_clock()        # when the backend starts the program
    supervisor.watch(process)       # until the program has ended and its output is in
    supervisor.finish(final_usage)  # the readings that outlive the processes
    result = supervisor.result(exit_code, signal_number)

A backend spawns the program and gives the supervisor a `Process`: the fds to wait on, what
arrived on one of them, what the host sees the run using, and how to kill it all. The
supervisor does the rest the same way for every backend (cold bubblewrap, a container, a warm
pool's child): it holds stdout and stderr together, and the result channel, to their caps as
bytes arrive; polls the usage against the caps; watches the wall clock; ends the run by a kill
at the first cap hit; and builds the RunResult, whose flags only it sets.

CPU time is the program's limit, not the clock (see sandbox/limits.py). A program ends its
set-up by writing its CPU seconds so far (decimal ASCII, e.g. from `time.process_time()`) to
fd 4 and closing it, before it runs anything untrusted; from then on its CPU counts against
`Limits.cpu_seconds`. The figure it writes is believed only up to what the host measured.

A run may be given a later input (`Supervisor(limits, later_input)`): the program asks for it by
writing a byte to fd 5, and reads it from its stdin (a pipe, closed after it; without a later
input, stdin is at its end from the start). The request cuts the run in two: everything read
from the program before the later input is written is the part before the request (it cannot
depend on that input, whatever threads or blocked writes the program has), everything after is
the part after it. At the request, the supervisor first reads all the output its pipes already
hold, so that what the program wrote before asking is in the first part. Only the first
request counts; the caps hold over the whole run, and a cap hit is in the part it came in. The
part after the request is also held to caps of its own, counted from the request:
`Limits.later_cpu_seconds`, `Limits.later_wall_timeout_seconds` (a backstop), and
`Limits.later_unwaited_wall_seconds`: the wall time since the request less the largest time one
task of the run spent waiting for a core since then. The waits are the host's readings of each
task (`Usage.task_wait_seconds`), taken from the last reading before the request, or for a task
first seen after it, from that sight. The largest one task's, not their sum: threads that wait
for each other do not add up, and what a run's own tasks wait for is mostly its own CPU, which
the CPU cap holds (docs/security.md#the-time-a-grading-takes). A backend that cannot see its
tasks (gVisor) leaves the figure None, and the plain wall budget alone holds.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import select
import time
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any, Protocol

from sandbox.errors import SandboxError
from sandbox.limits import Limits
from sandbox.result import RunResult

# What the program sees, the same under every backend: its files, its environment, its fds.
SANDBOX_DIR = "/sandbox"
PROGRAM_PATH = "/sandbox/main.py"
SCRATCH_DIR = "/tmp"
ENVIRONMENT = {
    "PATH": "/usr/bin:/bin",
    "HOME": SCRATCH_DIR,
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
PAYLOAD_FD, START_FD, REQUEST_FD = 3, 4, 5
# The later input goes whole into a fresh pipe: that size never blocks the supervisor's write.
LATER_INPUT_MAX_BYTES = 65536
INPUT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")
START_REPORT_BYTES = 64  # a float in ASCII, and room to spare
POLL_SECONDS = 0.02
TEARDOWN_TIMEOUT_SECONDS = 5.0
DRAIN_SECONDS = 1.0  # how long output may still arrive after the program ended


def check_request(program: str, inputs: Mapping[str, bytes], limits: Limits) -> None:
    """Raise ValueError for an input name that is not a plain file name, or a file over
    file_size_bytes (the backends copy the files in under the run's RLIMIT_FSIZE)."""
    for name in inputs:
        if not INPUT_NAME.fullmatch(name) or name == "main.py":
            raise ValueError(f"input name {name!r} is not a plain file name (or is main.py)")
    sizes = {"main.py": len(program.encode()), **{name: len(data) for name, data in inputs.items()}}
    for name, size in sizes.items():
        if size > limits.file_size_bytes:
            raise ValueError(f"{name} ({size} bytes) is larger than Limits.file_size_bytes")


class Channel(enum.Enum):
    """What a backend read: output of the program, or news of it."""

    STDOUT = "stdout"
    STDERR = "stderr"
    PAYLOAD = "payload"
    STARTED = "started"  # fd 4 was closed; the bytes are what was written to it
    EXITED = "exited"  # the program has ended (what it left running is the backend's to kill)
    REQUESTED = "requested"  # the program wrote to fd 5: it asks for its later input


class Cap(enum.StrEnum):
    """The caps a run can hit, named as RunResult's flags, in the order limit_hit reports them."""

    TIMED_OUT = "timed_out"
    CPU_TIME = "cpu_time_exceeded"
    MEMORY = "memory_exceeded"
    PROCESSES = "process_limit_exceeded"
    FILE_SIZE = "file_size_exceeded"
    OPEN_FILES = "open_files_exceeded"
    OUTPUT = "output_truncated"
    PAYLOAD = "payload_truncated"


@dataclass(frozen=True)
class Usage:
    """What the host sees a run using at one moment; None where this backend cannot see it."""

    cpu_seconds: float | None = None  # of every process of the run, since it started
    memory_bytes: int | None = None  # resident now, where no memory cgroup caps it
    peak_memory_bytes: int | None = None
    oom_kills: int = 0  # processes the kernel's OOM killer ended
    processes: int | None = None  # tasks now, where no pids cgroup caps them
    process_limit_hits: int = 0  # forks a pids cgroup refused
    most_open_files: int = 0  # the most fds one process of the run holds
    file_size_cap_reached: bool = False  # a file in scratch reached file_size_bytes
    # Each task's (thread's) time spent runnable, waiting for a core, since it began, by task id
    # (sandbox.host_view.task_wait_seconds): of every task of the run that lives now.
    task_wait_seconds: Mapping[int, float] | None = None


class Process(Protocol):
    """A spawned run as the supervisor sees it; each backend has its own."""

    def wait_fds(self) -> list[int]:
        """The fds to wait on now; none once there is nothing more to read."""
        ...

    def read(self, fd: int) -> list[tuple[Channel, bytes]]:
        """Read what `fd` has: output, the end of set-up, the program's exit (or nothing yet)."""
        ...

    def usage(self) -> Usage:
        """What the run uses now."""
        ...

    def kill(self) -> None:
        """SIGKILL every process of the run (may be called more than once)."""
        ...

    def give(self, data: bytes) -> None:
        """Write `data` (at most LATER_INPUT_MAX_BYTES) to the program's stdin and close it."""
        ...


@dataclass(frozen=True)
class _Cut:
    """Where a run's request for its later input cut what had been read of it."""

    stdout: int
    stderr: int
    payload: int
    hits: frozenset[Cap]
    cpu_seconds: float
    peak_memory_bytes: int | None
    waited_seconds: float | None
    at: float


class Supervisor:
    """Holds one run to its limits, from its start to its RunResult."""

    def __init__(self, limits: Limits, later_input: bytes | None = None) -> None:
        if later_input is not None and len(later_input) > LATER_INPUT_MAX_BYTES:
            raise ValueError(f"a later input is at most {LATER_INPUT_MAX_BYTES} bytes")
        self.limits = limits
        self.later_input = later_input
        self.asked = False  # the program wrote to fd 5
        self.answered = False  # ... and the first request was dealt with
        self.cut: _Cut | None = None
        self.hits: set[Cap] = set()
        self.payload, self.stdout, self.stderr = bytearray(), bytearray(), bytearray()
        self.started = time.monotonic()
        self.exited_at: float | None = None
        self.killed_at: float | None = None
        self.startup_cpu_seconds: float | None = None  # None until the program ends its set-up
        self.total_cpu_seconds = 0.0
        self.peak_memory_bytes: int | None = None
        # The longest wait for a core of one task: over the whole run, and since the request
        # (from each task's wait at the baseline: the last reading before the request).
        self.waited_seconds: float | None = None
        self.later_waited_seconds: float | None = None
        self.wait_baseline: dict[int, float] = {}

    def start_clock(self) -> None:
        """The wall clock starts now (not while waiting for a uid or an engine)."""
        self.started = time.monotonic()

    @property
    def cpu_seconds(self) -> float:
        """The CPU the run is held to: what it used after its set-up (all of it, without one)."""
        return max(0.0, self.total_cpu_seconds - (self.startup_cpu_seconds or 0.0))

    def wall_deadline(self) -> float:
        """When the run is stopped for its wall time: its whole, or its part after the request."""
        deadline = self.started + self.limits.wall_timeout_seconds
        if self.cut is not None:
            deadline = min(deadline, self.cut.at + self.limits.later_wall_timeout_seconds)
        return deadline

    def watch(self, process: Process) -> None:
        """Read and poll until the program has ended and its output drained, or it was killed."""
        # The first reading one interval in: at the start there is nothing to see yet, and a
        # short run ends before it (its exit is read once, by `finish`).
        next_poll = time.monotonic() + POLL_SECONDS
        while True:
            now = time.monotonic()
            wall_deadline = self.wall_deadline()
            fds = process.wait_fds()
            if not fds or (self.exited_at is not None and now > self.exited_at + DRAIN_SECONDS):
                return
            if self.exited_at is None and self.killed_at is None:
                if now >= wall_deadline:
                    self.end(process, Cap.TIMED_OUT)
                elif now >= next_poll:
                    self.check(process, process.usage())
                    next_poll = now + POLL_SECONDS
            if self.exited_at is not None:
                wake = self.exited_at + DRAIN_SECONDS
            elif self.killed_at is not None:
                if now > self.killed_at + TEARDOWN_TIMEOUT_SECONDS:
                    raise SandboxError("the sandbox did not die after SIGKILL")
                wake = self.killed_at + TEARDOWN_TIMEOUT_SECONDS
            else:
                wake = min(wall_deadline, next_poll)
            poller = select.poll()
            for fd in process.wait_fds():
                poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll(max(0.0, wake - time.monotonic()) * 1000):
                if fd not in process.wait_fds():
                    continue  # closed by an earlier event of this batch; the number may be reused
                for channel, data in process.read(fd):
                    self.take(process, channel, data)
            if self.asked:  # only after this batch: a read by the cut would leave it stale
                self._cut(process)

    def take(self, process: Process, channel: Channel, data: bytes) -> None:
        """Hold what arrived to its cap, or record the news it brings."""
        if channel is Channel.EXITED:
            if self.exited_at is None:
                self.exited_at = time.monotonic()
        elif channel is Channel.REQUESTED:
            self.asked = True
        elif channel is Channel.STARTED:
            self._end_setup(process, data)
        elif channel is Channel.PAYLOAD:
            room = self.limits.payload_bytes - len(self.payload)
            self.payload += data[: max(0, room)]
            if len(data) > room:
                self.end(process, Cap.PAYLOAD)
        else:
            room = self.limits.output_bytes - len(self.stdout) - len(self.stderr)
            (self.stdout if channel is Channel.STDOUT else self.stderr).extend(data[: max(0, room)])
            if len(data) > room:
                self.end(process, Cap.OUTPUT)

    def _cut(self, process: Process) -> None:
        """The first request, while the program runs: the part before it ends here."""
        if self.later_input is None or self.answered:
            return
        self.answered = True
        self._read_what_is_there(process)
        self.check(process, process.usage())
        if self.exited_at is not None or self.killed_at is not None:
            return  # the run ended while its output was read: there is no later part
        self.cut = _Cut(
            len(self.stdout), len(self.stderr), len(self.payload), frozenset(self.hits),
            self.cpu_seconds, self.peak_memory_bytes, self.waited_seconds, time.monotonic(),
        )  # fmt: skip
        process.give(self.later_input)

    def _read_what_is_there(self, process: Process) -> None:
        """Read every fd until none has anything more now, for at most DRAIN_SECONDS (a program
        writing without end would hold it forever). Only completeness hangs on it, not secrecy:
        whatever is read before the later input is given cannot depend on it."""
        deadline = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < deadline:
            poller = select.poll()
            for fd in process.wait_fds():
                poller.register(fd, select.POLLIN)
            ready = [fd for fd, _ in poller.poll(0)]
            if not ready:
                return
            for fd in ready:
                if fd in process.wait_fds():
                    for channel, data in process.read(fd):
                        self.take(process, channel, data)

    def _end_setup(self, process: Process, report: bytes) -> None:
        if self.startup_cpu_seconds is not None or self.exited_at is not None:
            return  # only once, and only while the program runs
        try:
            reported = float(report[:START_REPORT_BYTES].decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return  # not a report: fd 4 merely closed (at the exit, say)
        if not math.isfinite(reported) or reported < 0:
            return
        measured = process.usage().cpu_seconds
        self.startup_cpu_seconds = reported if measured is None else min(reported, measured)
        if self.startup_cpu_seconds >= self.limits.startup_cpu_seconds:
            self.end(process, Cap.CPU_TIME)

    def check(self, process: Process, usage: Usage) -> None:
        """Record a reading of the running program; end the run at every cap it shows hit."""
        hits = self._caps_hit(usage)
        if (
            usage.task_wait_seconds is not None
            and self.unwaited_later_seconds(time.monotonic())
            >= self.limits.later_unwaited_wall_seconds
        ):
            hits.append(Cap.TIMED_OUT)
        for cap in hits:
            self.end(process, cap)

    def unwaited_later_seconds(self, now: float) -> float:
        """The wall time of the part after the request that its tasks did not spend waiting for
        a core (0 before the request)."""
        if self.cut is None:
            return 0.0
        return now - self.cut.at - (self.later_waited_seconds or 0.0)

    def _note_waits(self, waits: Mapping[int, float]) -> None:
        if waits:
            self.waited_seconds = max(self.waited_seconds or 0.0, *waits.values())
        if self.cut is None:
            self.wait_baseline = dict(waits)
            return
        # A task first seen now counts from now: whatever it waited before is lost, never
        # gained (it may be older than the request, and have waited before it).
        since = [wait - self.wait_baseline.setdefault(tid, wait) for tid, wait in waits.items()]
        self.later_waited_seconds = max(self.later_waited_seconds or 0.0, *since, 0.0)

    def _caps_hit(self, usage: Usage) -> list[Cap]:
        limits = self.limits
        if usage.cpu_seconds is not None:
            self.total_cpu_seconds = max(self.total_cpu_seconds, usage.cpu_seconds)
        if usage.peak_memory_bytes is not None:
            self.peak_memory_bytes = max(self.peak_memory_bytes or 0, usage.peak_memory_bytes)
        if usage.task_wait_seconds is not None:
            self._note_waits(usage.task_wait_seconds)
        hits = []
        if usage.oom_kills or (usage.memory_bytes or 0) >= limits.memory_bytes:
            hits.append(Cap.MEMORY)
        if usage.process_limit_hits or (usage.processes or 0) >= limits.max_processes:
            hits.append(Cap.PROCESSES)
        cpu_cap = (
            limits.cpu_cap_before_start_seconds
            if self.startup_cpu_seconds is None
            else limits.cpu_seconds
        )
        cut = self.cut
        if self.cpu_seconds >= cpu_cap or (
            cut is not None and self.cpu_seconds - cut.cpu_seconds >= limits.later_cpu_seconds
        ):
            hits.append(Cap.CPU_TIME)
        if usage.most_open_files >= limits.open_files:
            hits.append(Cap.OPEN_FILES)
        if usage.file_size_cap_reached:
            hits.append(Cap.FILE_SIZE)
        return hits

    def end(self, process: Process, cap: Cap) -> None:
        """A cap was hit: record it, and kill the whole run (once)."""
        self.hits.add(cap)
        if self.killed_at is None:
            self.killed_at = time.monotonic()
            process.kill()

    def finish(self, usage: Usage) -> None:
        """After the end: the caps whose traces outlive the processes (an OOM kill, a big file)."""
        self.hits.update(self._caps_hit(usage))

    def result(self, exit_code: int | None, signal_number: int | None) -> RunResult:
        """The run's result; with a later input, the part before the request, and the part
        after it (None if the program never asked) as its `after_request`."""
        ended = self.exited_at or self.killed_at or time.monotonic()
        whole = RunResult(
            exit_code=exit_code,
            signal=signal_number,
            **_flags(self.hits),
            wall_seconds=ended - self.started,
            cpu_seconds=self.cpu_seconds,
            startup_cpu_seconds=self.startup_cpu_seconds,
            peak_memory_bytes=self.peak_memory_bytes,
            waited_seconds=self.waited_seconds,
            payload=bytes(self.payload),
            stdout=bytes(self.stdout),
            stderr=bytes(self.stderr),
            started_monotonic=self.started,
        )
        cut = self.cut
        if cut is None:
            return whole
        before = dataclasses.replace(
            whole,
            exit_code=None,
            signal=None,
            **_flags(cut.hits),
            wall_seconds=cut.at - self.started,
            cpu_seconds=cut.cpu_seconds,
            peak_memory_bytes=cut.peak_memory_bytes,
            waited_seconds=cut.waited_seconds,
            payload=whole.payload[: cut.payload],
            stdout=whole.stdout[: cut.stdout],
            stderr=whole.stderr[: cut.stderr],
        )
        after = dataclasses.replace(
            whole,
            **_flags(self.hits - cut.hits),
            wall_seconds=ended - cut.at,
            cpu_seconds=max(0.0, self.cpu_seconds - cut.cpu_seconds),
            startup_cpu_seconds=None,
            waited_seconds=self.later_waited_seconds,
            started_monotonic=cut.at,
            payload=whole.payload[cut.payload :],
            stdout=whole.stdout[cut.stdout :],
            stderr=whole.stderr[cut.stderr :],
        )
        return dataclasses.replace(before, after_request=after)


def _flags(hits: Set[Cap]) -> dict[str, Any]:
    """RunResult's flags, for the caps hit."""
    return {cap.value: cap in hits for cap in Cap}
