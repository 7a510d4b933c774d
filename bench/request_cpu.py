"""The server's own CPU per API request, for this tree and, side by side, another revision.

    python bench/request_cpu.py                       # this tree
    python bench/request_cpu.py --against 5c17d6e     # and that revision, both up at once

Each tree gets `loopgrade serve` (embedded default, the warm pool) on a fresh data directory,
grades one submission of every exercise, then answers requests one at a time over a kept-alive
connection: GET /healthz (the framework's floor: no key, no database), GET of a graded
submission, and a POST replayed with the same Idempotency-Key (the key, the intake's lookup and
the answer, without a grading). The kinds and the trees take turns in blocks of `--block`
requests, `--rounds` times, so that the machine's speed, which drifts by a third within
minutes here, weighs on every column alike. The figure is the server process's user + system
CPU (/proc) over its blocks, per request; the load client runs beside it on the same cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from grade_load import REPO, Client, mixed_load, process_cpu_seconds, server, warm_up

Request = Callable[[Client, str], object]


def replayed_post(body: bytes) -> Request:
    def post(client: Client, _: str) -> object:
        status, _location, content = client.request(
            "POST", "/api/v1/submissions", body, {"Idempotency-Key": "request-cpu-replay"}
        )
        assert status == 202, content
        return content

    return post


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", help="another revision, served beside this")
    parser.add_argument("--block", type=int, default=100, help="requests in a row of one kind")
    parser.add_argument("--rounds", type=int, default=12, help="blocks of each kind per tree")
    args = parser.parse_args()

    exercise, code = mixed_load()[0]
    body = json.dumps({"exercise": exercise, "learner": "replayed", "code": code}).encode()
    kinds: dict[str, Request] = {
        "GET /healthz": lambda client, _: client.request("GET", "/healthz"),
        "GET a submission": lambda client, location: client.get(location),
        "POST replayed": replayed_post(body),
    }
    with contextlib.ExitStack() as stack:
        trees = {"this tree": REPO}
        if args.against:
            other = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="request-cpu-")))
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", args.against],
                capture_output=True,
                check=True,
            )
            subprocess.run(["tar", "-x", "-C", str(other)], input=archive.stdout, check=True)
            trees[args.against] = other
        served = {}
        for name, checkout in trees.items():
            process, url, key = stack.enter_context(server("bwrap", None, None, checkout))
            client = Client(url, key)
            served[name] = (process.pid, client, warm_up(client)[0][0])
        cpu = {(name, kind): 0.0 for name in served for kind in kinds}
        for _ in range(args.rounds):
            for kind, request in kinds.items():
                for name, (pid, client, location) in served.items():
                    before = process_cpu_seconds(pid)
                    for _ in range(args.block):
                        request(client, location)
                    cpu[name, kind] += process_cpu_seconds(pid) - before

    count = args.block * args.rounds
    print(f"server CPU ms per request ({count} of each, in blocks of {args.block})")
    print(f"{'':20}" + "".join(f"{name:>14}" for name in served))
    for kind in kinds:
        cells = "".join(f"{1000 * cpu[name, kind] / count:>14.2f}" for name in served)
        print(f"{kind:20}{cells}")


if __name__ == "__main__":
    sys.exit(main())
