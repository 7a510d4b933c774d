"""Submit-to-graded latency and throughput of a running loopgrade server.

    python bench/grade_latency.py --url http://127.0.0.1:8000 --key KEY -n 40 --concurrency 4

Keeps `--concurrency` submissions in flight (a closed loop): each client submits, polls the
`Location` until the submission is graded, then submits the next. Half the submissions are
the exercise's reference solution, the other half its known buggy loops in turn. Latency is
from just before the POST to the poll that first sees `graded` (or `error`), so it includes
queueing behind the server's grading workers and up to one poll interval.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

EXERCISES_DIR = Path(__file__).resolve().parent.parent / "exercises"


@dataclass(frozen=True)
class Sample:
    kind: str  # "solution" or the bug file's name
    status: str
    diagnosis: str | None
    latency_seconds: float


def workload(exercise: str, count: int) -> list[tuple[str, str]]:
    """`count` (kind, code) pairs: the solution, then a known bug, alternately."""
    folder = EXERCISES_DIR / exercise
    solution = ("solution", (folder / "solution.py").read_text())
    bugs = [(path.stem, path.read_text()) for path in sorted((folder / "bugs").glob("*.py"))]
    if not bugs:
        return [solution] * count
    bug_cycle = itertools.cycle(bugs)
    return [solution if index % 2 == 0 else next(bug_cycle) for index in range(count)]


def grade_one(
    client: httpx.Client, exercise: str, kind: str, code: str, args: argparse.Namespace
) -> Sample:
    started = time.monotonic()
    response = client.post(
        "/api/v1/submissions",
        # A learner per submission: the per-learner rate limit is not what is measured.
        json={"exercise": exercise, "learner": f"bench-{uuid.uuid4().hex[:12]}", "code": code},
    )
    if response.status_code != 202:
        sys.exit(f"submit failed: {response.status_code} {response.text}")
    location = response.headers["location"]
    while True:
        body = client.get(location).json()
        if body["status"] in ("graded", "error"):
            return Sample(kind, body["status"], body["diagnosis"], time.monotonic() - started)
        if time.monotonic() - started > args.timeout:
            sys.exit(f"{location} still {body['status']} after {args.timeout} s")
        time.sleep(args.poll_interval)


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="an API key (loopgrade keys create NAME)")
    parser.add_argument("-n", type=int, default=40, help="submissions in all")
    parser.add_argument("--concurrency", type=int, default=4, help="submissions in flight")
    parser.add_argument("--exercise", default="train-step")
    parser.add_argument("--poll-interval", type=float, default=0.05, help="seconds")
    parser.add_argument("--timeout", type=float, default=600, help="per submission, seconds")
    args = parser.parse_args()

    jobs = iter(workload(args.exercise, args.n))
    jobs_lock = threading.Lock()
    samples: list[Sample] = []

    def client_loop() -> None:
        headers = {"Authorization": f"Bearer {args.key}"}
        with httpx.Client(base_url=args.url, headers=headers, timeout=60) as client:
            while True:
                with jobs_lock:
                    job = next(jobs, None)
                if job is None:
                    return
                sample = grade_one(client, args.exercise, *job, args)
                with jobs_lock:
                    samples.append(sample)

    started = time.monotonic()
    threads = [threading.Thread(target=client_loop) for _ in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed_seconds = time.monotonic() - started
    if len(samples) != args.n:
        sys.exit(f"only {len(samples)} of {args.n} submissions finished")

    latencies = sorted(sample.latency_seconds for sample in samples)
    graded = [sample for sample in samples if sample.status == "graded"]
    wrong = [s for s in graded if s.kind == "solution" and s.diagnosis != "correct"]
    diagnoses = collections.Counter(sample.diagnosis or sample.status for sample in samples)
    print(f"server       {args.url}  exercise {args.exercise}")
    print(f"submissions  {args.n}  concurrency {args.concurrency}  poll {args.poll_interval} s")
    print(f"graded       {len(graded)}  error {args.n - len(graded)}", end="")
    print(f"  solution not graded correct {len(wrong)}")
    print("diagnoses    " + ", ".join(f"{name} {n}" for name, n in sorted(diagnoses.items())))
    print(
        "latency s    "
        f"p50 {percentile(latencies, 0.50):.2f}  p95 {percentile(latencies, 0.95):.2f}  "
        f"p99 {percentile(latencies, 0.99):.2f}  max {latencies[-1]:.2f}"
    )
    print(f"throughput   {len(graded) / elapsed_seconds:.3f} graded/s  ({elapsed_seconds:.1f} s)")


if __name__ == "__main__":
    main()
