"""A later input, given only once the program asks for it, cuts the run in two (supervise.py).

What must hold on every backend (cold bubblewrap, a cold container, and a warm pool in front of
either), because a grading's hidden cases are that later input and its first part is shown:
nothing in the part before the request can depend on the later input, whatever the program's
threads or blocked writes do; what the program wrote before asking is all in that part; a run
that never asks never gets it; and the caps hold over the whole run, each hit in its own part.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sandbox
from sandbox import Limits, PoolProgram, RunResult, cgroups
from sandbox.supervise import LATER_INPUT_MAX_BYTES
from tests.sandbox.conftest import CROWDED_CPU, docker_unavailable_reason, fast, spinners

PROGRAM = "exec(compile(open('/sandbox/job.py').read(), '/sandbox/job.py', 'exec'))\n"
SECRET = b"the-later-input-7f3a9"
LIMITS = fast(wall_timeout_seconds=30.0)
RUNNERS = ("bwrap", "docker", "bwrap-pool", "docker-pool")


@pytest.fixture(scope="module", params=RUNNERS)
def runner(request: pytest.FixtureRequest) -> Iterator[sandbox.Runner]:
    backend, _, pool = request.param.partition("-")
    if backend == "docker":
        reason = docker_unavailable_reason()
        if reason:
            pytest.skip(f"no docker sandbox on this host: {reason}")
    if not pool:
        yield sandbox.open_runner(backend)
        return
    reason = cgroups.unavailable_reason()
    if reason:
        pytest.skip(f"the warm pool needs groups of its own: {reason}")
    opened = sandbox.open_runner(
        backend, pool=PoolProgram(PROGRAM, {"job.py": b"pass\n"}, imports_torch=False), pool_size=1
    )
    assert isinstance(opened, sandbox.PoolRunner), opened.status
    yield opened
    opened.close()


def run(
    runner: sandbox.Runner, code: str, limits: Limits = LIMITS, later: bytes | None = SECRET
) -> RunResult:
    return runner.run(PROGRAM, {"job.py": code.encode()}, limits, later)


def in_either(part: RunResult) -> bytes:
    return part.stdout + part.stderr + part.payload


def test_what_was_written_before_asking_is_the_first_part_and_the_input_comes_after(
    runner: sandbox.Runner,
) -> None:
    code = (
        "import os, sys\n"
        "os.write(1, b'o' * 60000)\n"  # most of a pipe: the request must not overtake it
        "os.write(2, b'before')\n"
        "os.write(3, b'first')\n"
        "os.write(5, b'?')\n"
        "given = sys.stdin.buffer.read()\n"
        "os.write(1, b'got ' + given)\n"
        "os.write(3, b'second ' + given)\n"
    )
    before = run(runner, code)
    assert (before.stdout, before.stderr, before.payload) == (b"o" * 60000, b"before", b"first")
    assert (before.exit_code, before.signal, before.limit_hit) == (None, None, None)
    after = before.after_request
    assert after is not None
    assert (after.stdout, after.stderr, after.payload) == (
        b"got " + SECRET,
        b"",
        b"second " + SECRET,
    )
    assert (after.exit_code, after.limit_hit) == (0, None)


def test_threads_writing_across_the_request_show_the_input_only_after_it(
    runner: sandbox.Runner,
) -> None:
    """Threads that write whatever the program holds, on every channel, before and after the
    request (each waited for), and one large write that may block across it."""
    code = (
        "import os, sys, threading, time\n"
        "held = [b'nothing']\n"
        "wrote = {fd: (threading.Event(), threading.Event()) for fd in (1, 2, 3)}\n"
        "def chatter(fd):\n"
        "    while True:\n"
        "        value = held[0]\n"
        "        os.write(fd, b'[' + value + b']')\n"
        "        wrote[fd][value != b'nothing'].set()\n"
        "        time.sleep(0.001)\n"
        "for fd in wrote:\n"
        "    threading.Thread(target=chatter, args=(fd,), daemon=True).start()\n"
        "big = threading.Thread(target=lambda: os.write(1, b'x' * (1 << 20)))\n"
        "big.start()\n"
        "for before, _ in wrote.values():\n"
        "    before.wait()\n"
        "os.write(5, b'?')\n"
        "held[0] = sys.stdin.buffer.read()\n"
        "for _, after in wrote.values():\n"
        "    after.wait()\n"
        "big.join()\n"
        "os.write(3, b'done')\n"
    )
    roomy = fast(wall_timeout_seconds=30.0, output_bytes=4 << 20, payload_bytes=4 << 20)
    before = run(runner, code, roomy)
    after = before.after_request
    assert after is not None, before
    for channel in (before.stdout, before.stderr, before.payload):
        assert b"[nothing]" in channel
    assert SECRET not in in_either(before)
    for channel in (after.stdout, after.stderr, after.payload):
        assert b"[" + SECRET + b"]" in channel
    assert b"done" in after.payload
    assert before.stdout.count(b"x") + after.stdout.count(b"x") == 1 << 20


def test_only_the_first_request_counts(runner: sandbox.Runner) -> None:
    code = (
        "import os, sys\n"
        "os.write(5, b'?')\n"
        "os.write(5, b'again')\n"
        "os.write(3, b'between')\n"
        "os.write(5, b'?')\n"
        "os.write(3, sys.stdin.buffer.read())\n"
        "os.write(5, b'and again, after the input')\n"
    )
    before = run(runner, code)
    assert before.payload in (b"", b"between")  # written after asking: either part may have it
    after = before.after_request
    assert after is not None
    assert before.payload + after.payload == b"between" + SECRET
    assert after.exit_code == 0


def test_a_run_that_never_asks_never_gets_the_input(runner: sandbox.Runner) -> None:
    code = "import os, sys\nos.write(3, b'all ' + sys.stdin.buffer.read(0))\n"
    result = run(runner, code)
    assert (result.payload, result.exit_code, result.after_request) == (b"all ", 0, None)


def test_reading_stdin_without_asking_waits_until_the_wall_clock(runner: sandbox.Runner) -> None:
    code = "import os, sys\nos.write(3, b'waiting')\nos.write(3, sys.stdin.buffer.read())\n"
    result = run(runner, code, fast(wall_timeout_seconds=3.0))
    assert result.timed_out and result.after_request is None
    assert SECRET not in in_either(result)


def test_without_a_later_input_stdin_is_at_its_end_and_a_request_changes_nothing(
    runner: sandbox.Runner,
) -> None:
    code = (
        "import os, sys\n"
        "os.write(3, b'read ' + sys.stdin.buffer.read())\n"
        "os.write(5, b'?')\n"
        "os.write(3, b', asked')\n"
    )
    result = run(runner, code, later=None)
    assert (result.payload, result.exit_code, result.after_request) == (b"read , asked", 0, None)


def test_a_cap_hit_after_the_request_is_in_the_second_part_only(runner: sandbox.Runner) -> None:
    code = "import os, sys\nos.write(5, b'?')\nsys.stdin.buffer.read()\nwhile True:\n    pass\n"
    before = run(runner, code, fast(wall_timeout_seconds=30.0, cpu_seconds=1.0))
    after = before.after_request
    assert after is not None
    assert before.limit_hit is None
    assert after.limit_hit == "cpu_time_exceeded"


def test_the_part_after_the_request_has_a_cpu_budget_of_its_own(runner: sandbox.Runner) -> None:
    # The whole run's cap is far off: only the part after the request's own one can stop it.
    code = "import os, sys\nos.write(5, b'?')\nsys.stdin.buffer.read()\nwhile True:\n    pass\n"
    limits = fast(wall_timeout_seconds=30.0, cpu_seconds=20.0, later_cpu_seconds=0.5)
    before = run(runner, code, limits)
    after = before.after_request
    assert after is not None
    assert before.limit_hit is None
    assert after.limit_hit == "cpu_time_exceeded"
    assert after.cpu_seconds >= 0.5


def test_the_part_after_the_request_has_a_wall_backstop_of_its_own(
    runner: sandbox.Runner,
) -> None:
    # Sleeping costs no CPU: the plain wall budget, counted from the request, stops it. The part
    # before the request sleeps longer than that budget and is not stopped.
    code = (
        "import os, sys, time\n"
        "time.sleep(1.5)\n"
        "os.write(5, b'?')\n"
        "sys.stdin.buffer.read()\n"
        "time.sleep(60)\n"
    )
    limits = fast(wall_timeout_seconds=30.0, later_wall_timeout_seconds=1.0)
    before = run(runner, code, limits)
    after = before.after_request
    assert after is not None
    assert before.limit_hit is None and before.wall_seconds >= 1.5
    assert after.limit_hit == "timed_out"
    assert after.wall_seconds >= 1.0
    # Each part says when it began, on the host's one monotonic clock: the second at the cut.
    assert before.started_monotonic is not None and after.started_monotonic is not None
    assert after.started_monotonic == pytest.approx(before.started_monotonic + before.wall_seconds)


def test_the_part_after_the_request_is_stopped_by_its_wall_time_not_spent_waiting(
    runner: sandbox.Runner,
) -> None:
    # A sleep is not a wait for a core: the unwaited budget stops it long before the backstop,
    # and long before the sleep ends. Before the request, the same budget does not hold.
    code = (
        "import os, sys, time\n"
        "time.sleep(1.0)\n"
        "os.write(5, b'?')\n"
        "sys.stdin.buffer.read()\n"
        "time.sleep(5)\n"
        "os.write(3, b'slept')\n"
    )
    limits = fast(
        wall_timeout_seconds=60.0, later_wall_timeout_seconds=30.0, later_unwaited_wall_seconds=0.5
    )
    before = run(runner, code, limits)
    after = before.after_request
    assert after is not None
    assert before.limit_hit is None
    assert (after.limit_hit, after.payload) == ("timed_out", b"")
    assert after.waited_seconds is not None  # the host saw the run's tasks


def test_time_spent_waiting_for_a_core_is_not_held_against_the_part(
    runner: sandbox.Runner,
) -> None:
    """The part after the request spins on a CPU that host processes crowd, for longer (its own
    clock) than its unwaited budget: most of that time it waits for the core, and it is not
    stopped."""
    code = (
        "import os, sys, time\n"
        "os.write(5, b'?')\n"
        "sys.stdin.buffer.read()\n"
        f"os.sched_setaffinity(0, {{{CROWDED_CPU}}})\n"
        "end = time.monotonic() + 1.5\n"
        "while time.monotonic() < end:\n"
        "    pass\n"
        "os.write(3, b'done')\n"
    )
    limits = fast(
        wall_timeout_seconds=60.0, later_wall_timeout_seconds=30.0, later_unwaited_wall_seconds=1.0
    )
    # The run's group weighs as one spinner: it gets a ninth of the CPU (at most half, whatever
    # the grouping), so it spins for well under 1 s of its 1.5 s, and waits the rest.
    with spinners(8):
        before = run(runner, code, limits)
    after = before.after_request
    assert after is not None
    assert (after.limit_hit, after.exit_code, after.payload) == (None, 0, b"done")
    assert after.waited_seconds is not None and after.waited_seconds > 0
    assert after.wall_seconds > limits.later_unwaited_wall_seconds  # spun 1.5 s on its clock


def test_a_run_s_wait_is_its_longest_waiting_task_s_not_their_sum(
    runner: sandbox.Runner,
) -> None:
    """Four processes of the run spin on one CPU: each waits most of the time, their waits add
    up to more than the part's wall time; the figure is one task's, so within it."""
    code = (
        "import os, sys, time\n"
        "os.write(5, b'?')\n"
        "sys.stdin.buffer.read()\n"
        f"os.sched_setaffinity(0, {{{CROWDED_CPU}}})\n"
        "def waited():\n"
        "    return int(open('/proc/self/schedstat').read().split()[1])\n"
        "children = []\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        children = None\n"
        "        break\n"
        "    children.append(0)\n"
        "start, end = waited(), time.monotonic() + 1.0\n"
        "while time.monotonic() < end:\n"
        "    pass\n"
        "os.write(3, b'%d ' % (waited() - start))\n"
        "if children is None:\n"
        "    os._exit(0)\n"
        "for _ in children:\n"
        "    os.wait()\n"
    )
    before = run(runner, code, fast(wall_timeout_seconds=60.0))
    after = before.after_request
    assert after is not None
    assert after.limit_hit is None, after
    reported = [int(ns) / 1e9 for ns in after.payload.split()]
    assert len(reported) == 4
    assert after.waited_seconds is not None
    assert 0 < after.waited_seconds <= after.wall_seconds < sum(reported)


def test_a_later_input_too_large_for_a_pipe_is_refused(runner: sandbox.Runner) -> None:
    with pytest.raises(ValueError, match="at most"):
        run(runner, "pass\n", later=b"x" * (LATER_INPUT_MAX_BYTES + 1))
