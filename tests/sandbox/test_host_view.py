"""What the supervisor reads of a run's processes from the host (sandbox/host_view.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from sandbox import host_view
from tests.sandbox.conftest import CROWDED_CPU, spinners

# Spins on the crowded CPU until its own schedstat shows it waited 0.05 s for a core, says so,
# and blocks (not runnable: its figure stays) until its stdin ends.
WAITER = f"""
import os, sys
os.sched_setaffinity(0, {{{CROWDED_CPU}}})
def waited():
    return int(open('/proc/self/schedstat').read().split()[1]) / 1e9
while waited() < 0.05:
    pass
print(waited(), flush=True)
sys.stdin.read()
"""


def test_a_task_s_wait_for_a_core_is_read_from_the_host() -> None:
    with spinners(2):
        waiter = subprocess.Popen(
            [sys.executable, "-c", WAITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert waiter.stdout is not None and waiter.stdin is not None
        told = float(waiter.stdout.readline())
    waits = host_view.task_wait_seconds([waiter.pid])
    waiter.stdin.close()
    assert waiter.wait() == 0
    # Each task by its id; the process's one thread is the process. Read after the waiter said
    # its figure, so it is at least that.
    assert set(waits) == {waiter.pid}
    assert waits[waiter.pid] >= told >= 0.05
    # Nothing of a process that has ended.
    assert host_view.task_wait_seconds([waiter.pid]) == {}


def test_every_thread_of_a_process_is_read() -> None:
    done = threading.Event()
    thread = threading.Thread(target=done.wait)
    thread.start()
    try:
        waits = host_view.task_wait_seconds([os.getpid()])
    finally:
        done.set()
        thread.join()
    assert {os.getpid(), thread.native_id} <= set(waits)
    assert all(wait >= 0 for wait in waits.values())
