"""The warm pool: slots of forked, isolated children from zygotes that imported torch once.

One idea over 400 lines: the pool and its slots; each backend's outer sandbox for them is in
that backend's module.

    pool = Pool(BwrapOuter(bwrap_binary), program, warm_up_inputs, seccomp_filter, size=2)
    pool.start()                                 # SandboxUnavailable if no slot starts
    result = pool.run_program(inputs, limits)    # the same RunResult as a cold run

A slot is one zygote (sandbox/zygote.py) inside its own outer sandbox, which holds it in the
slot's cgroups: a bubblewrap sandbox started like a cold run's (sandbox.bwrap_pool.BwrapOuter:
its own leased host uid, no network, read-only root, cgroups made here), or a long-lived
container of the grading image (sandbox.docker.ContainerOuter: the same uid lease, the
container's own cgroups). A server that is not root leases no uid: its slots run as its own uid,
each zygote in a user namespace of its own as a cold run of that server is, in cgroups it makes
in its own group where the host delegated that group to it (sandbox/cgroups.py; docs/security.md
says what each host gets). Either way every job the zygote forks is born in the slot's cgroups:
memory, pids and a one-core CPU cap per slot, without joining a cgroup per job. A slot runs one
job at a time; the server supervises it from outside exactly as a cold run (pipes read and
capped, limits polled, wall clock, SIGKILL of the whole tree) and waits until nothing but the
zygote is left in the slot's cgroups before the next job. A job is made ready (pipes, inputs)
before a slot is free; with every slot busy it waits in line, and the thread that ends a slot's
job begins the first one waiting there at once. A zygote that dies is started again; a job that
finds no slot able to start fails with SandboxError.

The zygote runs one program only (the one it warmed up); the caller runs any other cold.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import math
import os
import resource
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, TypeVar

from sandbox import host_view, uids
from sandbox.cgroups import RunCgroups
from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.limits import Limits
from sandbox.pipes import memfd, read_pipe, readable, write_input
from sandbox.result import RunResult
from sandbox.supervise import (
    ENVIRONMENT,
    SANDBOX_DIR,
    TEARDOWN_TIMEOUT_SECONDS,
    Channel,
    Supervisor,
    Usage,
    check_request,
)

log = logging.getLogger(__name__)

ZYGOTE_SOURCE = Path(__file__).with_name("zygote.py").read_text()
ZYGOTE_PATH = "/sandbox/zygote.py"
SECCOMP_NAME = "seccomp.bpf"
CONTROL_FD = 3
START_TIMEOUT_SECONDS = 120.0  # import torch and the warm-up, on a loaded machine
MESSAGE_BYTES = 4096
# The zygote's own sandbox: one job's scratch at a time, and no CPU cap of its own (it lives
# for many jobs; each job gets its own RLIMIT_CPU).
ZYGOTE_LIMITS = Limits(
    wall_timeout_seconds=1e9, cpu_seconds=1e9, max_processes=1024, open_files=1024,
    file_size_bytes=1 << 40, scratch_bytes=1 << 20,
)  # fmt: skip
# Beyond the job's own processes: the zygote.
POOL_PROCESSES = 1
_T = TypeVar("_T")


class StartedZygote(Protocol):
    """A slot's outer sandbox, started: its zygote, and the cgroups that hold it and its jobs."""

    zygote_pid: int  # as this host sees it
    zygote_pidfd: int
    control: socket.socket  # the zygote's control socket (sandbox/zygote.py)
    cgroups: RunCgroups

    def stop(self) -> None:
        """Kill the zygote and everything of its sandbox; close the pidfd and the socket."""


class Outer(Protocol):
    """How a pool's slots get their outer sandbox: sandbox.bwrap_pool.BwrapOuter, or
    sandbox.docker.ContainerOuter (sandbox.backends names each backend's)."""

    name: str

    def start(
        self, index: int, uid: int, files: Mapping[str, bytes], config: dict[str, object]
    ) -> StartedZygote:
        """Start `python -I /sandbox/zygote.py CONFIG` as `uid`, `files` in /sandbox, in the slot's
        cgroups; `config` is the zygote's, and the outer adds how it reaches its control socket.
        Raises SandboxError (SandboxUnavailable when this host cannot do it at all)."""

    def close(self) -> None:
        """Once every slot has stopped."""


class _Slot:
    """One zygote in its outer sandbox and cgroups, and the one job it runs at a time."""

    def __init__(self, pool: Pool, index: int) -> None:
        self.pool = pool
        self.index = index
        self.zygote: StartedZygote | None = None
        self.lease: uids.UidLease | None = None
        self.uid = 0  # the zygote's and its jobs' uid, as the host sees it
        self.cgroups: RunCgroups | None = None
        self.control: socket.socket | None = None
        self.zygote_pid = 0
        self.baseline_memory_bytes = 0
        self.limits: Limits | None = None  # the limits its cgroups are set to

    @property
    def alive(self) -> bool:
        return self.zygote is not None and not readable(self.zygote.zygote_pidfd, 0)

    # -- start and stop --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the zygote and wait until it has warmed up; SandboxError if it cannot."""
        self.stop()
        if os.geteuid() == 0:
            self.lease = uids.lease_uid(uids.uid_range())
        self.uid = self.lease.uid if self.lease else os.geteuid()
        files = {
            "main.py": self.pool.program.encode(),
            "zygote.py": ZYGOTE_SOURCE.encode(),
            SECCOMP_NAME: self.pool.seccomp_filter,
            **self.pool.warm_up_inputs,
        }
        config: dict[str, object] = {
            "environment": ENVIRONMENT, "seccomp_path": f"{SANDBOX_DIR}/{SECCOMP_NAME}",
            "imports_torch": self.pool.imports_torch,
        }  # fmt: skip
        try:
            self.zygote = self.pool.outer.start(self.index, self.uid, files, config)
            # The pid first: job_pids() counts whatever else the cgroups hold as the job's.
            self.zygote_pid = self.zygote.zygote_pid
            self.control, self.cgroups = self.zygote.control, self.zygote.cgroups
            if self._receive(START_TIMEOUT_SECONDS)[0] != {"ready": True}:
                raise SandboxError("the zygote did not warm up (its log says why)")
            self.baseline_memory_bytes = self.cgroups.memory_bytes()
        except (OSError, SandboxError) as error:
            log.debug("slot start", exc_info=True)
            self.stop()
            if isinstance(error, SandboxUnavailable):
                raise
            raise SandboxError(f"warm pool slot {self.index} did not start: {error}") from error
        self.limits = None
        log.info(
            "warm pool slot %d ready (%s): zygote pid %d, uid %d, %d MiB",
            self.index, self.pool.outer.name, self.zygote_pid, self.uid,
            self.baseline_memory_bytes >> 20,
        )  # fmt: skip

    def stop(self) -> None:
        """Kill the zygote and everything of its slot; free the uid."""
        if self.zygote is not None:
            self.zygote.stop()
            self.zygote = None
        self.control = self.cgroups = None
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    # -- one job ---------------------------------------------------------------------------------

    def begin(self, job: _Job) -> None:
        """Start `job` here: the slot's cgroups set to its limits, then the zygote forks it."""
        assert self.cgroups is not None
        try:
            self._set_limits(job.limits)
            self._on_cgroups(self.cgroups.reset_peak)
            job.start(self)
        except SandboxError:
            self.stop()  # started again for the next job
            raise

    def finish(self, job: _Job) -> RunResult:
        """Supervise the job begun here to its end; the slot is clear for the next one after."""
        try:
            job.supervisor.watch(job)
            job.supervisor.finish(job.final_usage())
        except SandboxError:
            self.stop()
            raise
        finally:
            job.close()
            clean = self.control is None or self._clear()
        if not clean:
            self.stop()
            raise SandboxError("a warm pool job did not die within its teardown time")
        return job.result()

    def _set_limits(self, limits: Limits) -> None:
        if limits == self.limits:
            return
        assert self.cgroups is not None
        # The zygote's memory counts, as a cold run's own `import torch` does in its cgroup.
        cgroups, pids_max = self.cgroups, limits.max_processes + POOL_PROCESSES
        self._on_cgroups(lambda: cgroups.set_limits(limits.memory_bytes, pids_max))
        self.limits = limits

    def job_pids(self) -> set[int]:
        if self.cgroups is None:  # not started (or stopped): no zygote, no job
            return set()
        try:
            return self.cgroups.pids() - {self.zygote_pid}
        except FileNotFoundError:  # a slot container's cgroups go with it, once nothing is left
            return set()

    def kill_job(self) -> None:
        """SIGKILL every process of the slot but the zygote: the job's tree, whatever it forked."""
        for pid in self.job_pids():
            with contextlib.suppress(ProcessLookupError, OSError):
                pidfd = os.pidfd_open(pid)
                try:
                    # A pid still in the group after its pidfd was opened is one of the job's.
                    if pid in self.job_pids():
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                finally:
                    os.close(pidfd)

    def _clear(self) -> bool:
        """Kill what is left of the job and wait until only the zygote remains; False if not."""
        deadline = time.monotonic() + TEARDOWN_TIMEOUT_SECONDS
        while self.job_pids():
            self.kill_job()
            if time.monotonic() > deadline:
                log.error("warm pool slot %d: job processes survive SIGKILL", self.index)
                return False
            time.sleep(0.001)
        return True

    def _receive(self, timeout_seconds: float) -> tuple[dict[str, object] | None, list[int]]:
        """The zygote's next message (None if it closed the socket or sent garbage), and the fds
        that came with it, which the caller closes."""
        assert self.control is not None
        if not readable(self.control.fileno(), timeout_seconds):
            return None, []
        message, fds, _, _ = socket.recv_fds(self.control, MESSAGE_BYTES, 1)
        try:
            value = json.loads(message) if message else None
        except ValueError:
            value = None
        return (value if isinstance(value, dict) else None), fds

    def _on_cgroups(self, call: Callable[[], _T]) -> _T:
        """call(), on the slot's cgroups: SandboxError if they are gone."""
        try:
            return call()
        except OSError as error:
            raise self._cgroups_gone(error) from error

    def counters(self) -> tuple[float, int, int]:
        """CPU seconds, OOM kills and refused forks of the slot so far (the zygote's included)."""
        assert self.cgroups is not None
        try:
            return (
                self.cgroups.cpu_seconds(),
                self.cgroups.oom_kills(),
                self.cgroups.process_limit_hits(),
            )
        except OSError as error:
            raise self._cgroups_gone(error) from error

    def _cgroups_gone(self, error: OSError) -> SandboxError:
        # A slot container's cgroups go with it: its zygote has died.
        return SandboxError(f"warm pool slot {self.index} lost its cgroups: {error}")


class _Job:
    """One job: made ready before a slot is free (its pipes, its inputs in memfds), then begun
    on a slot, and from there what the shared supervisor sees (sandbox.supervise.Process)."""

    slot: _Slot  # once begun

    def __init__(
        self, inputs: Mapping[str, bytes], limits: Limits, later_input: bytes | None
    ) -> None:
        self.limits = limits
        self.supervisor = Supervisor(limits, later_input)
        self.begun = False
        self.start_report = bytearray()
        self.status: int | None = None
        self.scratch_fd = -1
        self.base_cpu, self.base_oom, self.base_refused = 0.0, 0, 0
        channels = [
            Channel.PAYLOAD, Channel.STARTED, Channel.STDOUT, Channel.STDERR, Channel.REQUESTED
        ]  # fmt: skip
        # A pipe for each channel, then the job's stdin, then a memfd for each input; all closed
        # again if making one fails (out of fds or memory), as nothing else would close them.
        made: list[int] = []
        try:
            for _ in range(len(channels) + 1):
                made.extend(os.pipe())
            for data in inputs.values():
                made.append(memfd(data))
        except BaseException:
            for fd in made:
                os.close(fd)
            raise
        pipes, memfds = made[: 2 * len(channels) + 2], made[2 * len(channels) + 2 :]
        read_ends, write_ends = pipes[0::2], pipes[1::2]
        # The job's pipes still open, by read end.
        self.reading = dict(zip(read_ends[:-1], channels, strict=True))
        self.stdin_w = write_ends[-1]  # until its later input is given (or none is)
        # What the zygote gets: the other ends, then the inputs; closed here once sent.
        self.given = [*write_ends[:-1], read_ends[-1], *memfds]
        if later_input is None:
            self.give(b"")
        self.header = json.dumps({
            "input_names": list(inputs),
            "scratch_bytes": limits.scratch_bytes,
            "rlimits": [[limit, *value] for limit, value in _job_rlimits(limits).items()],
        }).encode()  # fmt: skip

    def start(self, slot: _Slot) -> None:
        """Hand the job to the slot's zygote, which forks the child that runs it."""
        assert slot.control is not None
        self.slot, self.begun = slot, True
        self.base_cpu, self.base_oom, self.base_refused = slot.counters()
        self.supervisor.start_clock()
        try:
            socket.send_fds(slot.control, [self.header], self.given)
        except OSError as error:
            raise SandboxError(f"the zygote of slot {slot.index} is gone: {error}") from error
        finally:
            self._close_given()

    def _close_given(self) -> None:
        for fd in self.given:
            os.close(fd)
        self.given = []

    def close(self) -> None:
        self._close_given()
        held = [*self.reading, self.scratch_fd, self.stdin_w]
        for fd in [fd for fd in held if fd >= 0]:
            os.close(fd)
        self.reading = {}
        self.scratch_fd = self.stdin_w = -1

    def give(self, data: bytes) -> None:
        if self.stdin_w >= 0:
            write_input(self.stdin_w, data)
            os.close(self.stdin_w)
            self.stdin_w = -1

    # -- what the supervisor sees ----------------------------------------------------------------

    def wait_fds(self) -> list[int]:
        control = [] if self.status is not None else [self.slot.control.fileno()]  # type: ignore[union-attr]
        return [*self.reading, *control]

    def read(self, fd: int) -> list[tuple[Channel, bytes]]:
        if fd not in self.reading:
            return self._from_zygote()
        events, ended = read_pipe(fd, self.reading[fd], self.start_report)
        if ended:
            self._close(fd)
        return events

    def _close(self, fd: int) -> None:
        del self.reading[fd]
        os.close(fd)

    def _from_zygote(self) -> list[tuple[Channel, bytes]]:
        message, fds = self.slot._receive(0)
        if message is not None and message.get("started") is True and len(fds) == 1:
            # The job's /tmp, held to the end to check file sizes, whenever the job ends.
            self.scratch_fd = fds.pop()
        for fd in fds:
            os.close(fd)
        if message is None:
            raise SandboxError(f"the zygote of warm pool slot {self.slot.index} died")
        if "started" in message:
            return []
        status = message.get("status")
        if not isinstance(status, int):
            raise SandboxError(f"the zygote sent {message!r}")
        self.status = status
        self.kill()  # whatever the job left running dies with it
        return [(Channel.EXITED, b"")]

    def usage(self) -> Usage:
        cpu, oom, refused = self.slot.counters()
        pids = self.slot.job_pids()
        return Usage(
            cpu_seconds=max(0.0, cpu - self.base_cpu),
            oom_kills=oom - self.base_oom,
            process_limit_hits=refused - self.base_refused,
            most_open_files=max((host_view.open_fd_count(pid) for pid in pids), default=0),
            file_size_cap_reached=self.scratch_fd >= 0
            and host_view.file_size_cap_reached(self.scratch_fd, self.limits.file_size_bytes),
            task_wait_seconds=host_view.task_wait_seconds(pids),
        )

    def final_usage(self) -> Usage:
        assert self.slot.cgroups is not None
        peak = self.slot._on_cgroups(self.slot.cgroups.peak_memory_bytes)
        return dataclasses.replace(self.usage(), most_open_files=0, peak_memory_bytes=peak)

    def kill(self) -> None:
        self.slot.kill_job()

    def result(self) -> RunResult:
        assert self.status is not None
        if os.WIFSIGNALED(self.status):
            return self.supervisor.result(None, os.WTERMSIG(self.status))
        # Read as a cold run's: bwrap reports the program's death by signal N as status 128 + N.
        status = os.WEXITSTATUS(self.status)
        return self.supervisor.result(*((None, status - 128) if status > 128 else (status, None)))


class _Turn:
    """A job waiting for a slot: `given` is set once it has one (and was begun on it, or not)."""

    def __init__(self, job: _Job) -> None:
        self.job = job
        self.given = threading.Event()
        self.slot: _Slot | None = None
        self.failure: Exception | None = None


class Pool:
    """`size` slots, each running one job at a time; run_program() waits for a free one."""

    def __init__(
        self,
        outer: Outer,
        program: str,
        warm_up_inputs: Mapping[str, bytes],
        seccomp_filter: bytes,
        size: int,
        imports_torch: bool = True,
    ) -> None:
        if size < 1:
            raise ValueError(f"a warm pool needs at least one slot, not {size}")
        self.outer = outer
        self.program = program
        self.warm_up_inputs = dict(warm_up_inputs)
        self.seccomp_filter = seccomp_filter
        self.imports_torch = imports_torch
        self.slots = [_Slot(self, index) for index in range(size)]
        self.lock = threading.Lock()
        self.idle: collections.deque[_Slot] = collections.deque()
        self.waiting: collections.deque[_Turn] = collections.deque()

    def start(self) -> None:
        """Start every slot at once; SandboxUnavailable if none starts (the reasons logged)."""
        failures: list[str] = []

        def start_slot(slot: _Slot) -> None:
            try:
                slot.start()
            except SandboxError as error:
                failures.append(str(error))
                log.warning("%s", error)
            else:
                self._release(slot)

        threads = [threading.Thread(target=start_slot, args=(s,)) for s in self.slots]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if len(failures) == len(self.slots):
            raise SandboxUnavailable("the warm pool could not start: " + " | ".join(failures))

    def run_program(
        self, inputs: Mapping[str, bytes], limits: Limits, later_input: bytes | None = None
    ) -> RunResult:
        """Run the pool's program on `inputs` (and `later_input` on request: see
        sandbox/supervise.py) in a fresh isolated child of a warm zygote."""
        check_request(self.program, inputs, limits)
        job = _Job(inputs, limits, later_input)
        try:
            slot, failure = self._acquire(job)
            try:
                if failure is not None:
                    raise failure
                if not job.begun:
                    if not slot.alive:
                        log.warning(
                            "warm pool slot %d: the zygote died; starting it again", slot.index
                        )
                        try:
                            slot.start()
                        except SandboxError as error:
                            raise SandboxUnavailable(str(error)) from error
                    slot.begin(job)
                return slot.finish(job)
            finally:
                self._release(slot)
        finally:
            job.close()

    def _acquire(self, job: _Job) -> tuple[_Slot, Exception | None]:
        """A free slot; with none, the first to finish its job, which has begun `job` already
        (or failed to: the error). The job's own thread then only supervises it."""
        with self.lock:
            if self.idle:
                return self.idle.popleft(), None
            turn = _Turn(job)
            self.waiting.append(turn)
        turn.given.wait()
        assert turn.slot is not None
        return turn.slot, turn.failure

    def _release(self, slot: _Slot) -> None:
        """Give the slot to the first job waiting, begun on it here and now: this thread holds
        the interpreter's lock already, and the waiting one would first have to get it
        (docs/performance.md#the-freed-slots-thread-begins-the-next-job). Without one waiting,
        the slot is idle."""
        with self.lock:
            if not self.waiting:
                self.idle.append(slot)
                return
            turn = self.waiting.popleft()
        try:
            if slot.alive:  # a dead zygote is started again by the job's own thread
                slot.begin(turn.job)
        except Exception as error:  # raised in the job's own thread, as if it had begun it
            turn.failure = error
        finally:
            turn.slot = slot
            turn.given.set()

    @property
    def ready_slots(self) -> int:
        return sum(slot.alive for slot in self.slots)

    def close(self) -> None:
        for slot in self.slots:
            slot.stop()
        self.outer.close()


def _job_rlimits(limits: Limits) -> dict[int, tuple[int, int]]:
    """A job's rlimits; memory is the slot cgroup's to cap (torch maps ~700 MB of address space)."""
    # A backstop: the supervisor holds the job's CPU, set-up apart, to its caps.
    cpu_seconds = math.ceil(limits.startup_cpu_seconds + limits.cpu_seconds)
    # The pids cgroup refuses first, and records that it did; RLIMIT_NPROC counts the slot's uid.
    processes = limits.max_processes + POOL_PROCESSES + 1
    return {
        # As PID 1 the job ignores SIGXCPU: the hard limit's SIGKILL is what ends it.
        resource.RLIMIT_CPU: (cpu_seconds, cpu_seconds + 1),
        resource.RLIMIT_FSIZE: (limits.file_size_bytes, limits.file_size_bytes),
        resource.RLIMIT_NOFILE: (limits.open_files, limits.open_files),
        resource.RLIMIT_NPROC: (processes, processes),
        resource.RLIMIT_CORE: (0, 0),
    }


def log_zygote_line(index: int, line: bytes) -> None:
    """One line a slot's zygote (or its outer sandbox) printed: only its own failures."""
    log.warning("warm pool slot %d: %s", index, line.decode(errors="replace").rstrip())
