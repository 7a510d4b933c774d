"""Grading under load through a real server: cold bwrap, the warm pool, docker and the docker
pool (its slots in containers), side by side.

    python bench/grade_load.py                        # all four, default counts
    python bench/grade_load.py --backends pool --burst 500 --paced 200

For each backend it starts `loopgrade serve` (embedded default: SQLite, in-process workers) on
a fresh data directory, grades one submission of every exercise first (the trusted reference
trajectories are then cached, as on a server that has run a while), and measures:

- paced: `--paced` submissions at `--rate` per second, posted on schedule by a few client
  threads, so that none waits for another: latency is from just before the POST to the
  submission's `graded_at` (the server's clock, the same machine's), percentiles p50/p95/p99;
- sustained: `--sustained-rate` submissions a second (50 by default) for `--sustained-seconds`,
  posted on schedule the same way: the gradings a second from the first POST to the last
  `graded_at`, and the latency's p50, p99 and maximum. A server that keeps up grades at the
  rate posted, with a latency that stays flat; one that does not builds a queue, and the
  latency grows through the phase. While a queue drains the client asks only for the last one
  posted, as in the burst, so that its reads do not load the server it measures;
- burst: `--burst` submissions posted at once (32 client threads): throughput is the count over
  the time from the first POST to the last `graded_at` (and the time until the last POST was
  answered, since graders wait for what is not yet posted). Meanwhile the client asks only
  whether the last one posted is graded, every 0.2 s, then reads every result once;
- independent clients: `--independent` clients (500 by default) at once, each on a connection
  of its own (as a class's browsers, an LMS's workers, curl loops; the burst above uses 32
  keep-alive connections), each POSTing one submission with an Idempotency-Key and, told 503,
  posting it again on a new connection after its Retry-After: how many were answered at
  once with 202 and how many with 503, the slowest first answer, the retries, the time until
  every client had its 202, and until every one was graded. A small asyncio client, not a
  load tool: what is measured is "N at once, each once, all graded" at the server's clock,
  which Locust's users (looping with wait times, its own statistics) do not give, and its
  gevent workers would take more of the two cores than these sockets;
- CPU seconds per grading over the burst: user + system time of the server and every process
  under it (sandboxes, zygotes, their reaped children); docker's containers run under the
  engine, not the server, so for docker only the server's own share is counted, and for the
  docker pool its slot containers' CPU is read from their cgroups (cpuacct) and added; and of
  that, the server process's own (its HTTP, database, supervising and judging threads; the
  rest is the sandboxes');
- where the machine's CPU went over the burst (until the client saw the last one posted
  graded, a poll after it at most; so are the CPU seconds above): the cores busy on average
  (from /proc/stat: everything on the machine, the server, this benchmark's own client,
  anything else running), of which stolen by the hypervisor, and this client's own CPU per
  grading (its POSTs and polls share the cores with the server). Busy cores short of the
  machine's count mean the server left CPU unused; all busy means the CPU per grading is what
  limits throughput;
- peak memory: the server process's resident peak (VmHWM), and the peak over the burst of the
  proportional set size (PSS) of the server and everything under it (for the docker pool: and
  of its slot containers' processes), sampled every 0.2 s.

The load is mixed: every exercise's solution and known bugs, and failing submissions (an exit
while loading, an exception while loading, a missing function; not a syntax error, which the
server refuses before grading). Cold backends take seconds per grade, so they get smaller
counts (`--cold-paced`, `--cold-burst`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import itertools
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The repo's one way to serve in a process, and to send a request on a connection of its own.
from tests.servers import (  # noqa: E402
    raw_request,
    request_on_own_connection,
    running_server,
)

EXERCISES = REPO / "exercises"
FAILING = [
    "import sys\nsys.exit(3)\n",
    "raise RuntimeError('at import')\n",
    "def not_the_entry_point():\n    return 0\n",
]
BACKENDS = {  # name: (LOOPGRADE_SANDBOX, pool size or None for the settings' default)
    "cold-bwrap": ("bwrap", 0),
    "pool": ("bwrap", None),
    "docker": ("docker", 0),
    "docker-pool": ("docker", None),  # the warm pool, its slots in containers
}
WARM = ("pool", "docker-pool")


def exercise_ids(checkout: Path = REPO) -> set[str]:
    """The exercises a checkout has (its folders with an exercise.toml)."""
    return {
        path.name
        for path in (checkout / "exercises").iterdir()
        if (path / "exercise.toml").exists()
    }


def mixed_load(exercises: set[str] | None = None) -> list[tuple[str, str]]:
    """(exercise, code): per exercise (this tree's, or those of `exercises`) its solution, its
    bugs and the failing submissions."""
    load = []
    for name in sorted(exercise_ids() if exercises is None else exercise_ids() & exercises):
        folder = EXERCISES / name
        codes = [(folder / "solution.py").read_text()]
        codes += [path.read_text() for path in sorted(folder.glob("bugs/*.py"))]
        load += [(folder.name, code) for code in codes + FAILING]
    return load


@dataclass
class Measured:
    latencies_seconds: list[float]
    sustained_latencies_seconds: list[float]
    sustained_seconds: float  # from the first POST to the last graded_at
    burst_count: int
    burst_seconds: float
    burst_posted_seconds: float
    cpu_seconds_per_grading: float
    server_cpu_seconds_per_grading: float
    client_cpu_seconds_per_grading: float
    cores_busy: float
    cores_stolen: float
    server_peak_rss_bytes: int
    tree_peak_pss_bytes: int
    errors: int
    independent: Independent


def tree_pids(root: int) -> list[int]:
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                pending += [
                    int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                ]
        except OSError:
            pass
    return found


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU of the tree, including what its members have reaped."""
    return sum(process_cpu_seconds(pid, reaped=True) for pid in tree_pids(root))


def process_cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU of one process (all its threads), and of its reaped children if asked."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    # utime stime, then cutime cstime
    return sum(int(value) for value in fields[11 : 15 if reaped else 13]) / os.sysconf("SC_CLK_TCK")


def tree_pss_bytes(root: int) -> int:
    total = 0
    for pid in tree_pids(root):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def slot_containers(server_pid: int) -> list[tuple[int, Path]]:
    """The docker pool's slot containers of a server: their zygote's pid and cpuacct group."""
    from sandbox import docker as docker_backend

    client = docker_backend.connect()
    try:
        label = [f"{docker_backend.LABEL}=pool", f"{docker_backend.PID_LABEL}={server_pid}"]
        found = []
        for container in client.api.containers(filters={"label": label}):
            pid = int(client.api.inspect_container(container["Id"])["State"]["Pid"])
            cgroups = docker_backend.container_cgroups(pid, container["Id"])
            if cgroups is not None:
                found.append((pid, cgroups.dirs["cpuacct"]))
        return found
    finally:
        client.close()


def slot_cpu_seconds(slots: list[tuple[int, Path]]) -> float:
    return sum(int((path / "cpuacct.usage").read_text()) / 1e9 for _, path in slots)


def machine_cpu_ticks() -> tuple[int, int, int]:
    """(busy, stolen, all) clock ticks of every core since boot, from /proc/stat's cpu line."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    steal = fields[7]
    total = sum(fields[:8])  # guest time is counted in user already
    return total - idle, steal, total


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


class Client:
    """The load's HTTP client: a keep-alive connection per thread, from the standard library's
    http.client. It shares the two cores with the server it measures, so it is kept lean:
    httpx's client cost 0.004-0.006 CPU s a grading here, taken from the server."""

    # A connection idle this long is dropped before it is used again: the server closes one
    # idle for 5 s, and a POST sent on it as it closes would be lost in between.
    IDLE_SECONDS = 2.0

    def __init__(self, url: str, key: str) -> None:
        address = urllib.parse.urlsplit(url)
        self.host, self.port = address.hostname or "127.0.0.1", address.port
        self.authorization = f"Bearer {key}"
        self.connections = threading.local()
        self.errors = 0  # submissions that ended as `error` (a server fault), not graded
        self.finished: dict[str, dict[str, object]] = {}  # location -> its body once finished

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str, bytes]:
        """(status, Location header or "", body) of one request on this thread's connection."""
        connection: http.client.HTTPConnection | None = getattr(self.connections, "open", None)
        if connection is None or time.monotonic() - self.connections.used > self.IDLE_SECONDS:
            if connection is not None:
                connection.close()
            connection = http.client.HTTPConnection(self.host, self.port, timeout=120)
            self.connections.open = connection
        headers = {"Authorization": self.authorization, **(headers or {})}
        if body is not None:
            headers["Content-Type"] = "application/json"
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        content = response.read()
        self.connections.used = time.monotonic()
        return response.status, response.getheader("location") or "", content

    def submit(self, exercise: str, code: str) -> tuple[str, float]:
        """POST one submission; its location and the wall-clock time just before the POST."""
        posted_at = time.time()
        body = {"exercise": exercise, "learner": f"load-{uuid.uuid4().hex[:12]}", "code": code}
        status, location, content = self.request(
            "POST", "/api/v1/submissions", json.dumps(body).encode()
        )
        if status != 202:
            sys.exit(f"submit failed: {status} {content.decode(errors='replace')}")
        return urllib.parse.urlsplit(location).path, posted_at

    def submit_paced(self, jobs: list[tuple[str, str]], rate: float) -> list[tuple[str, float]]:
        """POST one job every 1/rate seconds, on schedule whether or not earlier ones are
        answered (a few threads post); each one's location and the time just before its POST."""
        start = time.monotonic()

        def on_schedule(index: int) -> tuple[str, float]:
            time.sleep(max(0.0, start + index / rate - time.monotonic()))
            return self.submit(*jobs[index])

        with ThreadPoolExecutor(8) as threads:
            return list(threads.map(on_schedule, range(len(jobs))))

    def wait_all(
        self, posted: list[tuple[str, float]], timeout_seconds: float
    ) -> list[tuple[float, float]]:
        """Wait until every posted submission is graded; (posted, graded_at) of each, epoch s.

        Submissions are graded about in the order posted, so each sweep asks in that order and
        stops at the first one still waiting: a poll per waiting submission would load the
        server more than the grading does. graded_at is the server's clock, so the pace of
        the sweeps does not show in the latency.
        """
        pending = list(posted)
        finished: list[tuple[float, float]] = []
        deadline = time.monotonic() + timeout_seconds
        while pending:
            if time.monotonic() > deadline:
                sys.exit(f"{len(pending)} submissions not graded after {timeout_seconds} s")
            for location, posted_at in list(pending):
                body = self.get(location)
                if body["status"] not in ("graded", "error"):
                    break
                self.errors += body["status"] != "graded"
                self.finished[location] = body
                stamp = str(body["graded_at"] or body["created_at"])
                finished.append((posted_at, datetime.fromisoformat(stamp).timestamp()))
                pending.remove((location, posted_at))
            time.sleep(0.2)
        return finished

    def wait_for(self, posted: tuple[str, float], timeout_seconds: float) -> None:
        """Wait until one submission is graded, asking for it every 0.2 s.

        The last one posted of a burst or a sustained phase: while the server grades, the
        client asks for nothing else (as learners told their results by the pages' stream
        would), and `wait_all` then reads every submission once, asking again for the few still
        waiting. Polling each submission through a burst instead cost the server about 2.5 ms
        of CPU per answer, the machine a tenth of its CPU (docs/performance.md#smaller-decisions).
        """
        deadline = time.monotonic() + timeout_seconds
        while self.get(posted[0])["status"] not in ("graded", "error"):
            if time.monotonic() > deadline:
                sys.exit(f"{posted[0]} not graded after {timeout_seconds} s")
            time.sleep(0.2)

    def get(self, location: str) -> dict[str, object]:
        status, _, content = self.request("GET", location)
        if status != 200:
            sys.exit(f"GET {location}: {status} {content[:200].decode(errors='replace')}")
        body: dict[str, object] = json.loads(content)
        return body


@dataclass
class Independent:
    """What the independent clients saw (see the module docstring)."""

    count: int = 0
    accepted_at_once: int = 0
    refused_at_once: int = 0
    slowest_first_answer_seconds: float = 0.0
    retries: int = 0
    longest_retry_after_seconds: float = 0.0  # the longest wait a 503 told a client
    # Every 503, first answers and retries, by what refused it: admission control's early
    # refusal of a full queue (before a database session or a sign-in), the intake's exact
    # count, or a full lane (too many requests at once).
    refused_early: int = 0
    refused_at_intake: int = 0
    refused_busy: int = 0
    all_accepted_seconds: float = 0.0
    all_graded_seconds: float = 0.0
    idle_seconds: float = 0.0  # nothing queued or being graded while a client still waited
    correct: int = 0
    correct_late: int = 0  # correct, released after its hidden part's first delay
    # The server's and its sandboxes' CPU over the class, its refusals and retries included,
    # per grading (--class: what sizing needs, docs/operations.md); and the server process's
    # own share of it (its HTTP, database, supervising and judging: the sandboxes' is the rest).
    cpu_seconds_per_grading: float = 0.0
    server_cpu_seconds_per_grading: float = 0.0
    load_average: float = 0.0  # the machine's, 1 minute, as the class began


def idle_seconds(started: float, spans: list[tuple[float, float]]) -> float:
    """Seconds from `started` to the last span's end covered by no span (created -> graded:
    queued, being graded or waiting for its release): the graders had nothing to do."""
    idle, covered_to = 0.0, started
    for begin, end in sorted(spans):
        idle += max(0.0, begin - covered_to)
        covered_to = max(covered_to, end)
    return idle


RELEASED = re.compile(r"submission (\S+): released ([0-9.e-]+) s after its hidden cases began")


def released_after(log: Path) -> dict[str, float]:
    """Seconds from each submission's hidden part's start to its release, from the server log."""
    return {m[1]: float(m[2]) for m in RELEASED.finditer(log.read_text(errors="replace"))}


def first_delays() -> dict[str, float]:
    """Each exercise's first release delay (graders.grading.HiddenBudget), as this tree has it."""
    from graders.exercises import list_exercises
    from graders.grading import hidden_budget

    return {
        exercise.id: hidden_budget(exercise).first_delay_seconds for exercise in list_exercises()
    }


def independent_clients(
    client: Client,
    jobs: list[tuple[str, str]],
    logs: list[Path] | None = None,
    delays: dict[str, float] | None = None,
) -> Independent:
    """Each job posted at once by a client of its own, on a new connection per attempt."""
    seen = Independent(count=len(jobs))
    started = time.time()
    headers = {"Authorization": client.authorization, "Content-Type": "application/json",
               "Connection": "close"}  # fmt: skip

    async def one(exercise: str, code: str) -> tuple[str, float]:
        learner = f"load-{uuid.uuid4().hex[:12]}"
        body = json.dumps({"exercise": exercise, "learner": learner, "code": code}).encode()
        request = raw_request(
            "POST", "/api/v1/submissions", {**headers, "Idempotency-Key": learner}, body
        )
        posted_at = time.time()
        answer = await request_on_own_connection(client.port or 80, request)
        seen.slowest_first_answer_seconds = max(
            seen.slowest_first_answer_seconds, time.time() - posted_at
        )
        seen.accepted_at_once += answer.status == 202
        seen.refused_at_once += answer.status == 503
        while answer.status == 503:
            count_refusal(seen, answer.body)
            seen.retries += 1
            told = float(answer.headers["retry-after"])
            seen.longest_retry_after_seconds = max(seen.longest_retry_after_seconds, told)
            await asyncio.sleep(told)
            answer = await request_on_own_connection(client.port or 80, request)
        if answer.status != 202:
            sys.exit(f"submit failed: {answer.status} {answer.body[:200].decode(errors='replace')}")
        return urllib.parse.urlsplit(answer.headers["location"]).path, started

    async def all_at_once() -> list[tuple[str, float]]:
        return await asyncio.gather(*(one(*job) for job in jobs))

    posted = asyncio.run(all_at_once())
    seen.all_accepted_seconds = time.time() - started
    client.wait_for(posted[-1], 1800)
    seen.all_graded_seconds = max(done for _, done in client.wait_all(posted, 1800)) - started
    bodies = [client.finished[location] for location, _ in posted]
    seen.idle_seconds = idle_seconds(
        started,
        [
            (stamp(body["created_at"]), stamp(body["graded_at"] or body["created_at"]))
            for body in bodies
        ],
    )
    released: dict[str, float] = {}
    for log in logs or []:
        released |= released_after(log)
    for body in bodies:
        if body["diagnosis"] == "correct":
            seen.correct += 1
            first = (delays or {}).get(str(body["exercise"]), 0.25)
            seen.correct_late += released.get(str(body["id"]), 0.0) > first + 1e-6
    return seen


def count_refusal(seen: Independent, body: bytes) -> None:
    """By its sentence: the early refusal says the waiting count is a lower bound."""
    if b"The graders are busy: at least" in body:
        seen.refused_early += 1
    elif b"The graders are busy:" in body:
        seen.refused_at_intake += 1
    else:
        seen.refused_busy += 1


def refusals(seen: Independent) -> str:
    return f"{seen.refused_early} / {seen.refused_at_intake} / {seen.refused_busy}"


def late_share(seen: Independent) -> str:
    share = f" ({100 * seen.correct_late / seen.correct:.1f}%)" if seen.correct else ""
    return f"{seen.correct_late} of {seen.correct}{share}"


def stamp(value: object) -> float:
    return datetime.fromisoformat(str(value)).timestamp()


def warm_up(client: Client, load: list[tuple[str, str]] | None = None) -> list[tuple[str, float]]:
    """Grade one submission of every exercise (of `load`), so that each one's trusted
    trajectories are computed once, as on a server that has run a while; their locations and
    POST times."""
    load = load or mixed_load()
    warm = [client.submit(exercise, code) for exercise, code in load[:: len(load) // 5 or 1]]
    client.wait_all(warm, 900)
    return warm


@contextmanager
def server(
    backend: str,
    pool_size: int | None,
    worker_count: int | None,
    checkout: Path = REPO,
    queue_cap: int | None = 0,
) -> Iterator[tuple[subprocess.Popen[bytes], str, str, Path]]:
    """`loopgrade serve` of `checkout`'s code on a fresh data directory; it, its URL, an API
    key and its log. `queue_cap`: LOOPGRADE_MAX_WAITING_SUBMISSIONS (None: the settings')."""
    root = Path(tempfile.mkdtemp(prefix="grade-load-"))
    data_dir = root / "data"
    # No per-learner rate limit and (by default) no queue cap: a burst of 500 is the load
    # being measured.
    env = {**os.environ, "LOOPGRADE_SANDBOX": backend, "LOOPGRADE_SUBMISSION_RATE_LIMIT": "0"}
    if queue_cap is not None:
        env["LOOPGRADE_MAX_WAITING_SUBMISSIONS"] = str(queue_cap)
    if pool_size is not None:
        env["LOOPGRADE_SANDBOX_POOL_SIZE"] = str(pool_size)
    if worker_count is not None:
        env["LOOPGRADE_WORKER_COUNT"] = str(worker_count)
    created = subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", "create", "load", "--data-dir", str(data_dir)],
        cwd=checkout, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    key = created.stdout.splitlines()[-1]
    log = root / "server.log"
    serving = running_server(data_dir, log, env, startup_seconds=300, checkout=checkout)
    with serving as (process, url):
        yield process, url, key, log
    print(f"  (server log: {log})", file=sys.stderr)


def measure(
    name: str,
    paced: int,
    rate: float,
    sustained: int,
    sustained_rate: float,
    burst: int,
    independent: int,
    worker_count: int | None,
) -> Measured:
    backend, pool_size = BACKENDS[name]
    load = mixed_load()
    with server(backend, pool_size, worker_count) as (process, url, key, log):
        client = Client(url, key)
        warm_up(client)
        client.errors = 0

        posted = client.submit_paced(list(itertools.islice(itertools.cycle(load), paced)), rate)
        latencies = [graded - posted_at for posted_at, graded in client.wait_all(posted, 1800)]

        sustained_jobs = list(itertools.islice(itertools.cycle(load), sustained))
        posted = client.submit_paced(sustained_jobs, sustained_rate)
        # As for the burst: while a queue drains, reading each result as it comes would load
        # the server beside the gradings being measured (graded_at is the server's own clock).
        if posted:
            client.wait_for(posted[-1], 1800)
        graded = client.wait_all(posted, 1800)
        sustained_latencies = [done - posted_at for posted_at, done in graded]
        sustained_seconds = max((done for _, done in graded), default=0.0) - min(
            (posted_at for posted_at, _ in graded), default=0.0
        )

        # Burst: everything posted at once; CPU and memory measured over it.
        jobs = list(itertools.islice(itertools.cycle(load), burst))
        peak_pss, sampling = 0, True
        # The docker pool's slots run under the engine: counted from their containers. A slot
        # started again during the burst would be missed (the log says if one was).
        slots = slot_containers(process.pid) if name == "docker-pool" else []

        def sample() -> None:
            nonlocal peak_pss
            while sampling:
                roots = [process.pid] + [pid for pid, _ in slots]
                peak_pss = max(peak_pss, sum(tree_pss_bytes(root) for root in roots))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample)
        sampler.start()
        cpu_before = tree_cpu_seconds(process.pid) + slot_cpu_seconds(slots)
        server_before = process_cpu_seconds(process.pid)
        client_before, machine_before = own_cpu_seconds(), machine_cpu_ticks()
        burst_started = time.time()
        with ThreadPoolExecutor(32) as threads:
            posted = list(threads.map(lambda job: client.submit(*job), jobs))
        posted_seconds = time.time() - burst_started
        client.wait_for(posted[-1], 1800)
        # Measured to here: what reading every result afterwards costs is not grading's.
        cpu_seconds = tree_cpu_seconds(process.pid) + slot_cpu_seconds(slots) - cpu_before
        server_seconds = process_cpu_seconds(process.pid) - server_before
        client_seconds = own_cpu_seconds() - client_before
        machine_after = machine_cpu_ticks()
        burst_seconds = max(graded for _, graded in client.wait_all(posted, 1800)) - burst_started
        busy, stolen, total = (
            after - before for after, before in zip(machine_after, machine_before, strict=True)
        )
        cores = os.cpu_count() or 1
        sampling = False
        sampler.join()
        independent_seen = independent_clients(
            client,
            list(itertools.islice(itertools.cycle(load), independent)),
            [log],
            first_delays(),
        )
        return Measured(
            latencies_seconds=sorted(latencies),
            sustained_latencies_seconds=sorted(sustained_latencies),
            sustained_seconds=sustained_seconds,
            burst_count=burst,
            burst_seconds=burst_seconds,
            burst_posted_seconds=posted_seconds,
            cpu_seconds_per_grading=cpu_seconds / burst,
            server_cpu_seconds_per_grading=server_seconds / burst,
            client_cpu_seconds_per_grading=client_seconds / burst,
            cores_busy=cores * busy / total,
            cores_stolen=cores * stolen / total,
            server_peak_rss_bytes=peak_rss_bytes(process.pid),
            tree_peak_pss_bytes=peak_pss,
            errors=client.errors,
            independent=independent_seen,
        )


def measure_classes(
    checkout: Path,
    sizes: list[int],
    worker_count: int | None,
    queue_cap: int | None,
    load: list[tuple[str, str]],
) -> list[Independent]:
    """A class of each size at one deadline, in turn, on the warm pool of `checkout`'s code with
    the settings' queue cap (or `queue_cap`): each client once, resent after its Retry-After."""
    backend, pool_size = BACKENDS["pool"]
    with server(backend, pool_size, worker_count, checkout, queue_cap) as (process, url, key, log):
        client = Client(url, key)
        warm_up(client, load)
        delays = first_delays()
        classes = []
        for size in sizes:
            load_average = os.getloadavg()[0]
            cpu_before = tree_cpu_seconds(process.pid)
            server_before = process_cpu_seconds(process.pid)
            seen = independent_clients(
                client, list(itertools.islice(itertools.cycle(load), size)), [log], delays
            )
            seen.cpu_seconds_per_grading = (tree_cpu_seconds(process.pid) - cpu_before) / size
            seen.server_cpu_seconds_per_grading = (
                process_cpu_seconds(process.pid) - server_before
            ) / size
            seen.load_average = load_average
            classes.append(seen)
        return classes


def measure_celery_classes(size: int, hosts: int, worker_count: int | None) -> list[Independent]:
    """A class of `size` graded by Celery workers on PostgreSQL and Redis (/work/svc/env's
    LOOPGRADE_TEST_POSTGRES_URL and LOOPGRADE_TEST_REDIS_URL): the web process grades nothing
    and refuses beyond the settings' queue cap; first with one worker host, then with `hosts`.
    A host here is a `loopgrade worker` with one pool slot (a core's worth) and its own data
    directory; they share the database and the broker's queue."""
    from app.db import upgrade_database
    from app.settings import with_psycopg_driver
    from tests.services import create_database, drop_database

    admin_url = with_psycopg_driver(os.environ["LOOPGRADE_TEST_POSTGRES_URL"])
    name = f"grade_load_{os.getpid()}"
    drop_database(admin_url, name)
    shared = {
        "LOOPGRADE_DATABASE_URL": create_database(admin_url, name),
        "LOOPGRADE_BROKER_URL": os.environ["LOOPGRADE_TEST_REDIS_URL"],
        "LOOPGRADE_WORKER_QUEUE": f"grade-load-{uuid.uuid4().hex[:12]}",
    }
    upgrade_database(shared["LOOPGRADE_DATABASE_URL"])
    load = mixed_load()
    workers: list[subprocess.Popen[bytes]] = []
    root = Path(tempfile.mkdtemp(prefix="grade-load-hosts-"))

    def start_host() -> None:
        env = {**os.environ, **shared, "LOOPGRADE_SANDBOX": "bwrap",
               "LOOPGRADE_SANDBOX_POOL_SIZE": "1",
               "LOOPGRADE_DATA_DIR": str(root / f"host-{len(workers)}")}  # fmt: skip
        if worker_count is not None:
            env["LOOPGRADE_WORKER_COUNT"] = str(worker_count)
        log = (root / f"host-{len(workers)}.log").open("ab")
        command = [sys.executable, "-m", "app.cli", "worker"]
        workers.append(
            subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    try:
        os.environ.update(shared)  # the web process (server() passes os.environ on)
        with server("bwrap", 0, None, REPO, None) as (_, url, key, log):
            client = Client(url, key)
            delays = first_delays()
            classes = []
            for count in (1, hosts):
                while len(workers) < count:
                    start_host()
                wait_ready(sorted(root.glob("host-*.log")))
                warm_up(client)
                jobs = list(itertools.islice(itertools.cycle(load), size))
                logs = [log, *sorted(root.glob("host-*.log"))]
                load_average = os.getloadavg()[0]
                classes.append(independent_clients(client, jobs, logs, delays))
                classes[-1].load_average = load_average
            return classes
    finally:
        for name_ in shared:
            os.environ.pop(name_, None)
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(timeout=60)
        drop_database(admin_url, name)
        print(f"  (worker logs: {root})", file=sys.stderr)


def wait_ready(logs: list[Path]) -> None:
    """Until every worker host's log says its trusted trajectories are computed (it takes
    tasks from then on)."""
    deadline = time.monotonic() + 600
    while not all("trusted trajectories are computed" in each.read_text() for each in logs):
        if time.monotonic() > deadline:
            sys.exit(f"worker hosts not ready after 600 s: {logs}")
        time.sleep(1)


def class_rows(seen: Independent) -> list[tuple[str, str]]:
    cpu = f"{seen.cpu_seconds_per_grading:.3f}" if seen.cpu_seconds_per_grading else "-"
    server_cpu = (
        f"{seen.server_cpu_seconds_per_grading:.3f}" if seen.server_cpu_seconds_per_grading else "-"
    )
    return [
        ("  load average as it began", f"{seen.load_average:.1f}" if seen.load_average else "-"),
        ("  202 / 503 at once", f"{seen.accepted_at_once} / {seen.refused_at_once}"),
        ("  slowest first answer s", f"{seen.slowest_first_answer_seconds:.1f}"),
        ("  retries after 503", str(seen.retries)),
        ("  longest Retry-After s", f"{seen.longest_retry_after_seconds:.0f}"),
        ("  503 early / intake / busy", refusals(seen)),
        ("  all accepted in s", f"{seen.all_accepted_seconds:.1f}"),
        ("  all graded in s", f"{seen.all_graded_seconds:.1f}"),
        ("  graders idle s", f"{seen.idle_seconds:.1f}"),
        ("  correct released late", late_share(seen)),
        ("  CPU s per grading, all in", cpu),  # --class only
        ("    of which the server process", server_cpu),
    ]


def main_classes(args: argparse.Namespace) -> None:
    """--class: the classes on this tree, and with --against on that checkout too, in turn."""
    trees = {"this tree": REPO}
    if args.against:
        trees = {f"{args.against.name}": args.against, **trees}
    # The same load on every tree: the exercises they all have.
    load = mixed_load(set.intersection(*(exercise_ids(checkout) for checkout in trees.values())))
    results: dict[str, list[Independent]] = {}
    for name, checkout in trees.items():
        print(f"{name}: classes of {args.classes} ...", file=sys.stderr)
        results[name] = measure_classes(
            checkout, args.classes, args.worker_count, args.queue_cap, load
        )
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'':28}" + "".join(f"{name:>16}" for name in results))
    for index, size in enumerate(args.classes):
        print(f"class of {size}")
        rows = {name: class_rows(seen[index]) for name, seen in results.items()}
        for row, (label, _) in enumerate(next(iter(rows.values()))):
            print(f"{label:28}" + "".join(f"{cells[row][1]:>16}" for cells in rows.values()))


def main_celery(args: argparse.Namespace) -> None:
    """--class N --celery-hosts H: one class graded by one Celery worker host, then by H."""
    size = args.classes[0]
    print(f"a class of {size}: one worker host, then {args.celery_hosts} ...", file=sys.stderr)
    one, many = measure_celery_classes(size, args.celery_hosts, args.worker_count)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print(
        f"class of {size}, Celery on PostgreSQL"
        + " " * 4
        + f"{'1 host':>16}{args.celery_hosts:>10} hosts"
    )
    for (label, a), (_, b) in zip(class_rows(one), class_rows(many), strict=True):
        print(f"{label:28}{a:>16}{b:>16}")
    for seen in (one, many):
        print(f"  gradings a second: {size / seen.all_graded_seconds:.1f}")


def percentile(values: list[float], fraction: float) -> float:
    return values[max(1, math.ceil(fraction * len(values))) - 1]


def milliseconds(latencies: list[float], fraction: float) -> str:
    return f"{percentile(latencies, fraction) * 1000:.0f}" if latencies else "-"


def sustained_rate(measured: Measured) -> float:
    count = len(measured.sustained_latencies_seconds)
    return count / measured.sustained_seconds if count else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--rate", type=float, default=10.0, help="paced submissions per second")
    parser.add_argument("--paced", type=int, default=200, help="paced submissions (pool)")
    parser.add_argument(
        "--sustained-rate", type=float, default=50.0, help="sustained submissions per second"
    )
    parser.add_argument(
        "--sustained-seconds", type=float, default=20.0, help="how long (warm pools; 0: none)"
    )
    parser.add_argument("--burst", type=int, default=500, help="burst submissions (pool)")
    parser.add_argument(
        "--independent", type=int, default=500, help="independent clients at once (pool)"
    )
    parser.add_argument(
        "--cold-independent", type=int, default=20, help="independent clients at once (cold)"
    )
    parser.add_argument("--cold-paced", type=int, default=10, help="paced submissions (cold)")
    parser.add_argument("--cold-burst", type=int, default=20, help="burst submissions (cold)")
    parser.add_argument(
        "--worker-count", type=int, help="LOOPGRADE_WORKER_COUNT (default: the settings')"
    )
    parser.add_argument(
        "--class",
        dest="classes",
        type=int,
        nargs="+",
        help="only classes of these sizes at one deadline (warm pool, the settings' queue cap)",
    )
    parser.add_argument(
        "--queue-cap", type=int, help="--class: LOOPGRADE_MAX_WAITING_SUBMISSIONS (0: none)"
    )
    parser.add_argument(
        "--against", type=Path, help="--class: also a checkout of another revision, first"
    )
    parser.add_argument(
        "--celery-hosts",
        type=int,
        help="--class N: Celery worker hosts on PostgreSQL + Redis, graded by one, then by these",
    )
    args = parser.parse_args()
    if args.classes and args.celery_hosts:
        main_celery(args)
        return
    if args.classes:
        main_classes(args)
        return

    results: dict[str, Measured] = {}
    for name in args.backends:
        cold = name not in WARM
        paced, burst = (args.cold_paced, args.cold_burst) if cold else (args.paced, args.burst)
        independent = args.cold_independent if cold else args.independent
        # Cold runs take seconds each: they would only build a queue.
        sustained = 0 if cold else round(args.sustained_rate * args.sustained_seconds)
        print(
            f"{name}: {paced} paced at {args.rate:g}/s, {sustained} at {args.sustained_rate:g}/s, "
            f"a burst of {burst}, then {independent} independent clients ...",
            file=sys.stderr,
        )
        results[name] = measure(
            name,
            paced,
            args.rate,
            sustained,
            args.sustained_rate,
            burst,
            independent,
            args.worker_count,
        )

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    rows = [
        ("paced submissions", lambda m: f"{len(m.latencies_seconds)} at {args.rate:g}/s"),
        ("latency p50 ms", lambda m: milliseconds(m.latencies_seconds, 0.50)),
        ("latency p95 ms", lambda m: milliseconds(m.latencies_seconds, 0.95)),
        ("latency p99 ms", lambda m: milliseconds(m.latencies_seconds, 0.99)),
        (
            "sustained submissions",
            lambda m: f"{len(m.sustained_latencies_seconds)} at {args.sustained_rate:g}/s",
        ),
        ("sustained gradings/s", lambda m: f"{sustained_rate(m):.2f}"),
        ("sustained latency p50 ms", lambda m: milliseconds(m.sustained_latencies_seconds, 0.50)),
        ("sustained latency p99 ms", lambda m: milliseconds(m.sustained_latencies_seconds, 0.99)),
        ("sustained latency max ms", lambda m: milliseconds(m.sustained_latencies_seconds, 1.0)),
        ("burst submissions", lambda m: str(m.burst_count)),
        ("burst all posted in s", lambda m: f"{m.burst_posted_seconds:.1f}"),
        ("burst graded in s", lambda m: f"{m.burst_seconds:.1f}"),
        ("throughput gradings/s", lambda m: f"{m.burst_count / m.burst_seconds:.2f}"),
        ("CPU s per grading", lambda m: f"{m.cpu_seconds_per_grading:.3f}"),
        ("  of which the server process", lambda m: f"{m.server_cpu_seconds_per_grading:.3f}"),
        ("client CPU s per grading", lambda m: f"{m.client_cpu_seconds_per_grading:.3f}"),
        (
            f"cores busy of {os.cpu_count()} (stolen)",
            lambda m: f"{m.cores_busy:.2f} ({m.cores_stolen:.2f})",
        ),
        ("server peak RSS MiB", lambda m: f"{m.server_peak_rss_bytes / 2**20:.0f}"),
        ("all processes peak PSS MiB", lambda m: f"{m.tree_peak_pss_bytes / 2**20:.0f}"),
        ("not graded (error)", lambda m: str(m.errors)),
        ("independent clients", lambda m: str(m.independent.count)),
        (
            "  202 / 503 at once",
            lambda m: f"{m.independent.accepted_at_once} / {m.independent.refused_at_once}",
        ),
        ("  slowest first answer s", lambda m: f"{m.independent.slowest_first_answer_seconds:.1f}"),
        ("  retries after 503", lambda m: str(m.independent.retries)),
        ("  503 early / intake / busy", lambda m: refusals(m.independent)),
        ("  all accepted in s", lambda m: f"{m.independent.all_accepted_seconds:.1f}"),
        ("  all graded in s", lambda m: f"{m.independent.all_graded_seconds:.1f}"),
        ("  graders idle s", lambda m: f"{m.independent.idle_seconds:.1f}"),
        ("  correct released late", lambda m: late_share(m.independent)),
    ]
    names = list(results)
    print(f"{'':28}" + "".join(f"{name:>14}" for name in names))
    for label, cell in rows:
        print(f"{label:28}" + "".join(f"{cell(results[name]):>14}" for name in names))
    if "docker" in results:
        print("docker: CPU and PSS count the server only; its containers run under the engine")


if __name__ == "__main__":
    main()
