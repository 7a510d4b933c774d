"""Capacity of one grading host: in-process threads on SQLite beside a Celery worker on PostgreSQL.

    .venv/bin/python bench/grading_host.py [-n 24] [--workers 1] [--concurrency 4]

Starts both deployments on this machine, one after the other, and drives each with
bench/grade_latency.py (a closed loop of `--concurrency` clients, half correct solutions, half
known bugs): (a) `loopgrade serve` grading in its own `--workers` threads on SQLite; (b)
`loopgrade serve` as an API only, with one `loopgrade worker` of `--workers` threads, on a
PostgreSQL and a Redis of its own. Prints each run's report, then the throughput side by side
with the machine's load average (other work on the machine slows both alike).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.servers import running_server  # noqa: E402
from tests.services import create_database, postgres_server, redis_server  # noqa: E402


def loopgrade(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def drive(url: str, key: str, args: argparse.Namespace) -> tuple[str, float]:
    report = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "grade_latency.py"),
            f"--url={url}",
            f"--key={key}",
            f"-n={args.n}",
            f"--concurrency={args.concurrency}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"throughput\s+([0-9.]+) graded/s", report)
    assert match, report
    return report, float(match[1])


@contextmanager
def worker_process(env: dict[str, str], log_path: Path) -> Iterator[None]:
    with log_path.open("ab") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        # Driven only once it consumes the queue, as the in-process server is only once it
        # answers: its start-up (torch, the warm pool) is not a grading host's throughput.
        deadline = time.monotonic() + 300
        while " ready." not in log_path.read_text(errors="replace"):
            assert worker.poll() is None, f"worker exited: {log_path.read_text()}"
            assert time.monotonic() < deadline, f"worker not ready: {log_path.read_text()}"
            time.sleep(0.2)
        yield
    finally:
        worker.terminate()
        worker.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=24, help="submissions per deployment")
    parser.add_argument("--workers", type=int, default=1, help="grading threads of the host")
    parser.add_argument("--concurrency", type=int, default=4, help="submissions in flight")
    args = parser.parse_args()
    results: dict[str, float] = {}
    common = {
        **os.environ,
        "LOOPGRADE_WORKER_COUNT": str(args.workers),
        "LOOPGRADE_SUBMISSION_RATE_LIMIT": "0",
    }
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)

        env = {**common, "LOOPGRADE_DATA_DIR": str(directory / "in-process")}
        key = loopgrade("keys", "create", "bench", env=env)
        with running_server(directory / "in-process", directory / "a.log", env=env) as (_, url):
            report, results["in-process threads, SQLite"] = drive(url, key, args)
        print(report)

        with postgres_server() as postgres, redis_server(directory) as redis:
            env = {
                **common,
                "LOOPGRADE_DATA_DIR": str(directory / "celery"),
                "LOOPGRADE_DATABASE_URL": create_database(postgres.url, "bench"),
                "LOOPGRADE_BROKER_URL": redis.url,
            }
            key = loopgrade("keys", "create", "bench", env=env)
            with (
                running_server(directory / "celery", directory / "b.log", env=env) as (_, url),
                worker_process(env, directory / "worker.log"),
            ):
                report, results["Celery worker, PostgreSQL"] = drive(url, key, args)
            print(report)

    load = os.getloadavg()
    print(f"cores {os.cpu_count()}  load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"{'deployment':32} {'graded/s':>9} {'graded/min':>11}")
    for name, per_second in results.items():
        print(f"{name:32} {per_second:9.3f} {per_second * 60:11.1f}")


if __name__ == "__main__":
    main()
