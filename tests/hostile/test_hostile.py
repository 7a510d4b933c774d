"""Hostile submissions to train-step, through the grading service, on every sandbox backend
(the whole suite on the warm bwrap pool, the production path; conftest.FOCUSED: the others).

Each one is sent over the REST API to a real `loopgrade serve` (see conftest.py) and must end
graded: score 0 unless the code also trains correctly, the diagnosis that names what it did,
within its limit plus a small margin; then the server must still be up, have left nothing
running, and grade the next correct submission in full.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.conftest import (
    HONEST_BUG_CODE,
    MARGIN_SECONDS,
    REPO,
    Service,
)
from tests.sandbox.conftest import wait_for_release, waiting_at_barrier

TRAIN = textwrap.indent(
    "optimizer.zero_grad()\n"
    "loss = loss_fn(model(x), y)\n"
    "loss.backward()\n"
    "optimizer.step()\n"
    "return loss.item()\n",
    "    ",
)


def step(body: str, prelude: str = "") -> str:
    """A train_step whose body is `body` (dedented), after module-level `prelude`."""
    return (
        textwrap.dedent(prelude)
        + "\ndef train_step(model, optimizer, loss_fn, x, y):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
    )


def expect(
    service: Service,
    code: str,
    diagnosis: str,
    *,
    full_score: bool = False,
    feedback: str | None = None,
) -> dict[str, Any]:
    """Grade `code`; check its status, score, diagnosis and time (within the service's wall
    clock and a margin); then the server's health."""
    body, seconds = service.grade(code)
    assert body["status"] == "graded", (body, service.log_tail())
    assert body["diagnosis"] == diagnosis, body["feedback"]
    if full_score:
        assert body["score"] == body["max_score"] > 0, body
    else:
        assert body["score"] == 0, body
    if feedback is not None:
        assert feedback in body["feedback"], body["feedback"]
    assert seconds < service.wall_timeout_seconds + MARGIN_SECONDS, f"graded in {seconds:.1f} s"
    service.assert_healthy()
    return body


# -- time ----------------------------------------------------------------------------------------


def test_infinite_loop(service: Service) -> None:
    # The CPU limit, or the wall-clock one first when the machine is busy with other work.
    expect(service, step("while True:\n    pass\n"), "timeout", feedback="time limit of")


def test_sleeping_forever(service: Service) -> None:
    # The suite's limits reached the grader: the message names them.
    expect(
        service,
        step("time.sleep(10**6)\n", "import time\n"),
        "timeout",
        feedback=f"wall-clock time limit of {service.wall_timeout_seconds:g} s",
    )


def test_ignoring_sigterm_sigint_sigxcpu_while_spinning(service: Service) -> None:
    prelude = """
        import signal
        for number in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU, signal.SIGHUP):
            signal.signal(number, signal.SIG_IGN)
    """
    expect(service, step("while True:\n    pass\n", prelude), "timeout")


# -- processes -----------------------------------------------------------------------------------


def test_fork_bomb(service: Service) -> None:
    body = """
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    expect(service, step(body, "import os\n"), "runtime-error", feedback="processes")


def test_thread_explosion(service: Service) -> None:
    body = """
        threads = []
        while True:
            try:
                thread = threading.Thread(target=time.sleep, args=(10**6,))
                thread.start()
                threads.append(thread)
            except RuntimeError:
                pass
    """
    expect(service, step(body, "import threading, time\n"), "runtime-error", feedback="processes")


# -- memory, output, disk ------------------------------------------------------------------------


def test_memory_bomb_of_python_bytes(service: Service) -> None:
    body = """
        hoard = []
        while True:
            hoard.append(b"x" * (64 << 20))
    """
    expect(service, step(body), "memory-limit")


def test_memory_bomb_of_a_huge_tensor(service: Service) -> None:
    body = """
        import torch
        huge = torch.ones(2**30)  # 4 GiB of float32, written
        return float(huge.sum())
    """
    expect(service, step(body), "memory-limit")


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_flood(service: Service, stream: str) -> None:
    body = f"""
        line = "flood " * 200
        while True:
            print(line, file=sys.{stream})
    """
    expect(service, step(body, "import sys\n"), "output-limit")


def test_disk_fill_of_every_writable_place(service: Service) -> None:
    marker = f"fill-{uuid.uuid4().hex}"
    places = [
        "/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run", "/sandbox", "/", "/root",
        "/home", "/opt", os.path.expanduser("~"), str(service.data_dir), str(REPO), "."
    ]  # fmt: skip
    prelude = f"""
        import os
        written = []
        for place in {places!r} + [os.getcwd(), os.environ.get("HOME", "/")]:
            for number in range(4096):
                path = os.path.join(place, "{marker}-%d" % number)
                try:
                    with open(path, "wb") as file:
                        written.append(path)
                        file.write(b"x" * (1 << 20))
                except OSError:
                    break
        filled_bytes = sum(os.path.getsize(path) for path in set(map(os.path.realpath, written)))
        # Full scratch stops torch too (its first optimizer wants a temporary directory), so it
        # cleans up before it trains.
        for path in written:
            try:
                os.remove(path)
            except OSError:
                pass  # the same file by another name: /tmp is the cwd
    """
    # It fills what it may, its size-capped scratch, then trains correctly: a correct grade.
    body = (
        "assert 0 < filled_bytes <= 32 << 20, filled_bytes  # all of the scratch cap, no more\n"
        + textwrap.dedent(TRAIN)
    )
    expect(service, step(body, prelude), "correct", full_score=True)
    host_places: list[str | Path] = [
        "/tmp",
        "/var/tmp",
        "/dev/shm",
        service.data_dir,
        REPO,
        Path.home(),
    ]
    for host_place in map(Path, host_places):
        assert not list(host_place.glob(f"{marker}*")), host_place


def test_deep_recursion_crash(service: Service) -> None:
    # Through map() every level is a C call too: the C stack overflows and the process dies
    # of SIGSEGV. (Python-to-Python calls alone would only fill memory: no C stack in 3.11.)
    prelude = """
        import sys
        sys.setrecursionlimit(10**8)

        def deeper(depth):
            return list(map(deeper, [depth + 1]))
    """
    expect(service, step("return deeper(0)\n", prelude), "runtime-error", feedback="signal 11")


# -- processes outside it ------------------------------------------------------------------------


def test_killing_the_parent_pid_1_and_the_process_group(service: Service) -> None:
    prelude = """
        import os, signal
        targets = [os.getppid(), 1, -os.getpgid(0), -1]
        for target in targets:
            if target != 0:
                try:
                    os.kill(target, signal.SIGKILL)
                except OSError:
                    pass
    """
    code = step(TRAIN, prelude)
    if service.backend != "docker":
        # The program is PID 1 of its own namespace (bwrap's, or a pool child's): its parent is
        # outside (getppid() is 0), and SIGKILL from inside never reaches a namespace's init,
        # itself included.
        expect(service, code, "correct", full_score=True)
    else:
        # In a container the init is PID 1 and ignores it; the program's own group is itself.
        expect(service, code, "runtime-error", feedback="killed by signal 9")
    assert service.process.poll() is None


def test_connecting_to_a_tcp_listener_on_the_host(service: Service) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        server_port = int(service.url.rsplit(":", 1)[1])
        prelude = f"""
            import socket
            reached = []
            for port in ({port}, {server_port}):
                for host in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
                    try:
                        socket.create_connection((host, port), timeout=2).close()
                        reached.append((host, port))
                    except OSError:
                        pass
        """
        # It trains correctly only if it reached something: it must not.
        body = "if not reached:\n    raise RuntimeError('no network')\n" + textwrap.dedent(TRAIN)
        expect(service, step(body, prelude), "runtime-error", feedback="no network")
        with pytest.raises(TimeoutError):
            listener.accept()


# -- secrets and files ---------------------------------------------------------------------------


def test_reading_the_servers_secrets(service: Service) -> None:
    secret_file = service.data_dir / "secret.txt"
    prelude = f"""
        import glob, os
        found = []
        blobs = [repr(dict(os.environ))]
        paths = glob.glob("/proc/*/environ") + glob.glob("/proc/*/cmdline")
        paths += glob.glob("/proc/*/cwd/secret.txt") + glob.glob("/proc/*/root{secret_file}")
        paths.append({str(secret_file)!r})
        budget = 50_000  # every file named secret.txt it can reach, in a bounded walk
        for top, dirs, files in os.walk("/"):
            dirs[:] = [d for d in dirs if os.path.join(top, d) not in ("/proc", "/sys", "/dev")]
            paths += [os.path.join(top, name) for name in files if name == "secret.txt"]
            budget -= len(dirs) + len(files)
            if budget < 0:
                break
        for path in paths:
            try:
                blobs.append(open(path, "rb").read(4096).decode(errors="replace"))
            except OSError:
                pass
        for blob in blobs:
            if "env-secret-" in blob or "file-secret-" in blob:
                found.append(blob)
        print("found:", found)
    """
    # It trains correctly only if it found a secret: it must not.
    body = "if not found:\n    raise RuntimeError('no secret')\n" + textwrap.dedent(TRAIN)
    result = expect(service, step(body, prelude), "runtime-error", feedback="no secret")
    # Every response about it, and what the owner's page would show (its stored output).
    listing = service.client.get("/api/v1/submissions", headers=service.headers)
    assert listing.status_code == 200, listing.text
    stored = service.stored_text(result["id"])
    assert "found: []" in (stored[0] or "")
    for text in (json.dumps(result), listing.text, repr(stored)):
        assert service.env_secret not in text
        assert service.file_secret not in text


def test_a_file_planted_by_one_submission_is_invisible_to_the_next(service: Service) -> None:
    marker = f"planted-{uuid.uuid4().hex}"
    places = ["/tmp", "/var/tmp", "/dev/shm", "/sandbox", "/opt", "/"]
    planter = f"""
        import os
        for place in {places!r} + [os.getcwd(), os.environ.get("HOME", "/")]:
            try:
                with open(os.path.join(place, "{marker}"), "w") as file:
                    file.write("planted")
            except OSError:
                pass
    """
    expect(service, step(TRAIN, planter), "correct", full_score=True)
    finder = f"""
        import glob, os
        seen = []
        for place in {places!r} + [os.getcwd(), os.environ.get("HOME", "/")]:
            seen += glob.glob(os.path.join(place, "{marker}"))
    """
    body = "if not seen:\n    raise RuntimeError('nothing planted')\n" + textwrap.dedent(TRAIN)
    expect(service, step(body, finder), "runtime-error", feedback="nothing planted")


def test_writing_to_host_paths(service: Service) -> None:
    marker = f"written-{uuid.uuid4().hex}"
    targets = [
        service.data_dir / marker,
        REPO / marker,
        REPO / "graders" / marker,
        Path("/tmp") / marker,
        Path("/var/tmp") / marker,
        Path("/root") / marker,
        Path("/etc") / marker,
        Path("/") / marker,
    ]
    prelude = f"""
        for path in {[str(target) for target in targets]!r}:
            try:
                with open(path, "w") as file:
                    file.write("written from the sandbox")
            except OSError:
                pass
    """
    expect(service, step(TRAIN, prelude), "correct", full_score=True)
    assert [target for target in targets if target.exists()] == []


# -- forging the result --------------------------------------------------------------------------

FORGERIES = {
    "prints-fake-result-json": """
        import json
        print(json.dumps({"status": "ran", "score": 10, "max_score": 10, "diagnosis": "correct"}))
    """,
    "patches-allclose-equal-eq": """
        import torch
        torch.allclose = lambda *a, **k: True
        torch.equal = lambda *a, **k: True
        torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
    """,
    "patches-json-dumps-and-print": """
        import builtins, json
        json.dumps = lambda *a, **k: '{"status": "ran", "cases": [], "score": 10}'
        builtins.print = lambda *a, **k: None
    """,
    "scans-gc-and-frames-for-expected-weights": """
        import gc, sys, torch

        def copy_what_looks_expected(model):
            # Any other tensor of the weight's shape (the harness's, the case's), and anything a
            # caller's frame calls reference or expected: copy it in.
            frame = sys._getframe()
            while frame is not None:
                for name, value in list(frame.f_locals.items()):
                    wanted = "expected" in name or "reference" in name
                    if wanted and isinstance(value, torch.Tensor):
                        if value.shape == model.weight.shape:
                            with torch.no_grad():
                                model.weight.copy_(value)
                frame = frame.f_back
            for value in gc.get_objects():
                if isinstance(value, torch.Tensor) and value is not model.weight:
                    if value.shape == model.weight.shape and not value.requires_grad:
                        with torch.no_grad():
                            model.weight.copy_(value)
    """,
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_forging_does_not_raise_the_score(service: Service, name: str) -> None:
    honest = service.bug_score()
    code = textwrap.dedent(FORGERIES[name]) + "\n" + HONEST_BUG_CODE
    if name.startswith("scans-gc"):
        code = code.replace(
            "    loss.backward()", "    copy_what_looks_expected(model)\n    loss.backward()"
        )
        assert code.count("copy_what_looks_expected(model)") == 2
    body, seconds = service.grade(code)
    assert body["status"] == "graded", body
    assert body["score"] <= honest, body
    assert body["diagnosis"] != "correct"
    assert seconds < service.wall_timeout_seconds + MARGIN_SECONDS
    service.assert_healthy()


# Beyond train-step: checks decided by what the harness records, blinded or bypassed
# (docs/security.md, "What the code can blind only teaches"); the checks named must fail.
SECOND_UNIT_FORGERIES = {
    "evaluate-hooks-called-by-hand": (
        "evaluate",
        """
        import torch

        def evaluate(model, loss_fn, x, y):
            dropout = model[2]
            hooks = list(dropout._forward_pre_hooks.values())
            dropout._forward_pre_hooks.clear()
            model.eval()
            with torch.no_grad():
                for hook in hooks:
                    hook(dropout, (x,))
            model.train()
            return loss_fn(model(x), y).item()
        """,
        {"loss-correct", "eval-mode"},
    ),
    "resume-from-the-live-pair": (
        "resume-training",
        """
        LIVE = []

        def save(model, optimizer):
            LIVE.append((model, optimizer))
            return {}

        def resume(model, optimizer, state):
            saved_model, saved_optimizer = LIVE[-1]
            model.load_state_dict(saved_model.state_dict())
            optimizer.load_state_dict(saved_optimizer.state_dict())
        """,
        {"model-restored", "optimizer-restored", "training-continues"},
    ),
}


@pytest.mark.parametrize("name", sorted(SECOND_UNIT_FORGERIES))
def test_forging_a_second_unit_check(service: Service, name: str) -> None:
    exercise, code, failing = SECOND_UNIT_FORGERIES[name]
    body, _ = service.grade(textwrap.dedent(code), exercise=exercise)
    assert body["status"] == "graded", (body, service.log_tail())
    assert body["diagnosis"] != "correct", body["feedback"]
    passed = {check["id"] for check in body["checks"] if check["passed"]}
    assert not passed & failing, body["feedback"]
    service.assert_healthy()


@pytest.mark.parametrize(
    "exit_call",
    ["sys.exit(0)", "os._exit(0)", "raise SystemExit(0)"],
    ids=["exit", "os-exit", "raise"],
)
def test_exiting_with_status_0_early(service: Service, exit_call: str) -> None:
    code = step(exit_call + "\n", "import os, sys\n")
    expect(service, code, "runtime-error")


def test_a_forged_trace_on_the_result_channel(service: Service) -> None:
    prelude = """
        import json, os
        os.write(3, json.dumps({"status": "ran", "cases": [], "score": 10}).encode())
        os._exit(0)
    """
    expect(service, step(TRAIN, prelude), "runtime-error")


# -- two at once ---------------------------------------------------------------------------------


def test_two_submissions_at_once_cannot_see_or_signal_each_other(service: Service) -> None:
    """Each spy starts a beacon, waits at a barrier, then looks for the other's beacon in /proc
    and kills everything it may. The test holds the spies at the barrier until sandboxes of both
    submissions are there at once (the suite's server has two workers), so the two overlap
    whatever the machine's load; later waits of the same submissions are let through at once.
    """
    tokens = [f"beacon-{uuid.uuid4().hex}" for _ in range(2)]
    markers = [f"spy-{uuid.uuid4().hex}" for _ in range(2)]

    def spy(mine: str, theirs: str, marker: str) -> str:
        prelude = f"""
            import os, signal, subprocess, sys, time
            sleeper = "import time; time.sleep(300)"
            beacon = subprocess.Popen([sys.executable, "-c", sleeper, "{mine}"])
        """
        prelude = textwrap.dedent(prelude) + wait_for_release(marker)
        prelude += f"""
seen = []
deadline = time.monotonic() + 2
while time.monotonic() < deadline and not seen:
    for pid in os.listdir("/proc"):
        try:
            if "{theirs}" in open(f"/proc/{{pid}}/cmdline").read():
                seen.append(pid)
        except OSError:
            pass
    time.sleep(0.1)
try:
    os.kill(-1, signal.SIGKILL)  # everything it may signal, but itself
except OSError:
    pass
time.sleep(1)  # while the other one signals everything it may
"""
        body = (
            "if not seen:\n    raise RuntimeError('saw nothing of the other submission')\n"
            + textwrap.dedent(TRAIN)
        )
        return step(body, prelude)

    results: list[dict[str, Any]] = []

    def grade(code: str, learner: str) -> None:
        results.append(service.grade(code, learner=learner)[0])

    # Two learners (two accounts in league): one learner never holds every slot
    # (app/grading/queue.owner_share), so one learner's two would never run at once.
    threads = [
        threading.Thread(target=grade, args=(spy(tokens[0], tokens[1], markers[0]), "spy-a")),
        threading.Thread(target=grade, args=(spy(tokens[1], tokens[0], markers[1]), "spy-b")),
    ]
    for thread in threads:
        thread.start()
    overlapped = False
    while any(thread.is_alive() for thread in threads):
        # The same process waits again when the harness loads the code for the hidden cases:
        # whoever waits is let through, once the two have overlapped.
        waiting = [set(waiting_at_barrier(marker)) for marker in markers]
        overlapped = overlapped or all(waiting)
        if overlapped:
            for pid in set.union(*waiting):
                os.kill(pid, signal.SIGUSR1)
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    assert overlapped, f"the two submissions never ran at once: {results}"
    assert len(results) == 2
    for body in results:
        assert body["status"] == "graded", body
        assert body["score"] == 0
        # Had the other's kill reached it, it would have died by a signal instead.
        assert body["diagnosis"] == "runtime-error", body["feedback"]
        assert "saw nothing of the other submission" in body["feedback"], body["feedback"]
    service.assert_healthy()
