"""An LMS's view of a stack whose workers grade: a fake LTI 1.3 platform, served on this
host's loopback, is registered with the tool, launches a learner, who submits the reference
solution on the exercise page; passes once the platform has received its full score (AGS).

    python3 scripts/check_lti_passback.py TOOL_URL FAKE_PLATFORM_DIR

FAKE_PLATFORM_DIR holds tests/lti/fake_platform.py. Run where `python3 -m app.cli` reaches
the stack's database (its LOOPGRADE_* settings). With a broker the API host grades nothing: a
score that arrives is a worker's grade. scripts/check-compose.sh --up runs it in the api
container, on the stack's one loopback, which the workers share; tests/hosts runs it too.
"""

from __future__ import annotations

import html
import http.cookiejar
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import uvicorn

WAIT_SECONDS = 600.0


def say(message: str) -> None:
    print(f"check-lti-passback: {message}", file=sys.stderr, flush=True)


def main(tool_url: str, fake_platform_dir: str) -> int:
    sys.path.insert(0, fake_platform_dir)
    from fake_platform import FakePlatform, follow_login

    platform = FakePlatform(tool_url=tool_url.rstrip("/"))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    platform.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(platform.app(), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)

    added = subprocess.run(
        [sys.executable, "-m", "app.cli", "lti", "platforms", "add", *platform.cli_args()],
        capture_output=True,
        text=True,
    )
    if added.returncode != 0:
        say(f"registering the platform failed: {added.stderr}")
        return 1

    # A browser on loopback, where plain http is a secure context: `Secure` cookies go back.
    http.cookiejar.DefaultCookiePolicy.return_ok_secure = lambda *_: True  # type: ignore[method-assign]
    with httpx.Client(timeout=60) as browser:
        form = follow_login(browser, platform)
        fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.text))
        fields = {name: html.unescape(value) for name, value in fields.items()}
        launched = browser.post(f"{platform.tool_url}/lti/launch", data=fields)
        if launched.status_code != 303:
            say(f"the launch was refused: {launched.status_code} {launched.text[:500]}")
            return 1
        page = browser.get(platform.tool_url + launched.headers["location"], follow_redirects=True)
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        if token is None:
            say(f"no exercise form after the launch: {page.url}")
            return 1
        code = Path("exercises/train-step/solution.py").read_text()
        submitted = browser.post(str(page.url), data={"csrf_token": token[1], "code": code})
        if submitted.status_code != 303:
            say(f"the submission was refused: {submitted.status_code} {submitted.text[:500]}")
            return 1

    deadline = time.monotonic() + WAIT_SECONDS
    while not platform.scores:
        if time.monotonic() > deadline:
            say(f"no score reached the LMS in {WAIT_SECONDS:g} s")
            return 1
        time.sleep(0.5)
    ((score,),) = [list(scores.values()) for scores in platform.scores.values()]
    say(f"the LMS received the score {score.score_given:g}/{score.score_maximum:g}")
    server.should_exit = True
    return 0 if score.score_given == score.score_maximum else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
