"""A leased sandbox uid starts clean: leftovers of a run whose supervisor died are killed."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from sandbox import uids

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root leases sandbox uids")

# Outside the default range, so no other sandbox run of this machine holds it.
UID = 2000099901


def test_leasing_a_uid_kills_what_an_earlier_run_left_running() -> None:
    leftover = subprocess.Popen(["sleep", "600"], user=UID, group=UID, start_new_session=True)
    try:
        time.sleep(0.1)
        assert leftover.poll() is None
        lease = uids.lease_uid(range(UID, UID + 1))
        try:
            assert leftover.wait(timeout=5) == -9
            assert uids._processes_of(UID) == []
        finally:
            lease.release()
    finally:
        if leftover.poll() is None:
            leftover.kill()
