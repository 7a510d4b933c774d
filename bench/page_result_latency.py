"""Click-to-result latency of the exercise page: pushed (server-sent events) against polled.

    LOOPGRADE_SUBMISSION_RATE_LIMIT=0 LOOPGRADE_ANONYMOUS_SUBMISSION_RATE_LIMIT=0 \\
        loopgrade serve --port 8000 &
    python bench/page_result_latency.py --url http://127.0.0.1:8000 -n 10

Does what the page's script does, one submission at a time: posts the exercise form in the
background (`Accept: application/json`), then waits for the result either by the progress
stream (`/submissions/ID/events` until `done`: what the page does now) or by asking for the
result section every 0.5 s (what it did before). Latency is from just before the POST to the
moment the result is in hand. Submissions alternate between the reference solution and a
known buggy loop; the two ways take turns, so both see the same load. Each submission is a new
anonymous learner (a fresh cookie jar), hence the rate limits off.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

import httpx

EXERCISE = "train-step"
EXERCISE_DIR = Path(__file__).resolve().parent.parent / "exercises" / EXERCISE
POLL_INTERVAL_SECONDS = 0.5


def codes() -> list[str]:
    return [
        (EXERCISE_DIR / "solution.py").read_text(),
        *(path.read_text() for path in sorted((EXERCISE_DIR / "bugs").glob("*.py"))),
    ]


def submit(client: httpx.Client, code: str) -> dict[str, str]:
    page = client.get(f"/exercises/{EXERCISE}")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token, "no form on the exercise page"
    answer = client.post(
        f"/exercises/{EXERCISE}",
        data={"code": code, "csrf_token": token[1]},
        headers={"Accept": "application/json"},
    )
    assert answer.status_code == 202, answer.text
    urls: dict[str, str] = answer.json()
    return urls


def pushed(client: httpx.Client, urls: dict[str, str]) -> None:
    with client.stream("GET", urls["events"]) as stream:
        for line in stream.iter_lines():
            if line == "event: done":
                return
    raise AssertionError("the stream ended without done")


def polled(client: httpx.Client, urls: dict[str, str]) -> None:
    while 'data-finished="true"' not in client.get(urls["result"]).text:
        time.sleep(POLL_INTERVAL_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("-n", type=int, default=10, help="submissions per way")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {"pushed (SSE)": [], "polled every 0.5 s": []}
    waits = {"pushed (SSE)": pushed, "polled every 0.5 s": polled}
    all_codes = codes()
    for index in range(2 * args.n):
        way = list(waits)[index % 2]
        code = all_codes[(index // 2) % len(all_codes)]
        with httpx.Client(base_url=args.url, timeout=120) as client:
            start = time.perf_counter()
            urls = submit(client, code)
            waits[way](client, urls)
            samples[way].append(time.perf_counter() - start)
    print(f"{'way':<22}{'n':>4}{'p50 ms':>9}{'mean ms':>9}{'max ms':>9}")
    for way, values in samples.items():
        print(
            f"{way:<22}{len(values):>4}{statistics.median(values) * 1000:>9.0f}"
            f"{statistics.fmean(values) * 1000:>9.0f}{max(values) * 1000:>9.0f}"
        )


if __name__ == "__main__":
    main()
