#!/usr/bin/env bash
# docker-compose.yml, checked:
#
#   scripts/check-compose.sh          `compose config`: the files are valid and complete
#   scripts/check-compose.sh --up     also build the images, bring the stack up with two
#                                     workers, grade one submission through it over HTTP,
#                                     launch a learner from a fake LMS whose score a worker
#                                     sends it (scripts/check_lti_passback.py), check that
#                                     both workers grade from a warm pool, take it down
#
# Compose is the v2 plugin (`docker compose`) where installed; Debian bookworm packages only
# v1 (`docker-compose`, 1.29), which is installed when neither is there. Both read the files.
# On an engine without a bridge network (dockerd --bridge=none, as scripts/docker-engine.sh
# starts it) the stack runs with deploy/compose.loopback.yml: its services share one network
# namespace with only a loopback interface, so nothing of it is reachable from elsewhere, and
# the client that posts the submission runs inside it, in the api container.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "check-compose: $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
else
    if ! command -v docker-compose >/dev/null; then
        say "installing docker-compose (Debian has no compose v2 plugin)"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq docker-compose >/dev/null
    fi
    compose=(docker-compose)
fi
export LOOPGRADE_POSTGRES_PASSWORD=${LOOPGRADE_POSTGRES_PASSWORD:-check-$RANDOM$RANDOM}
export LOOPGRADE_SECRET_KEY=${LOOPGRADE_SECRET_KEY:-check-$RANDOM$RANDOM$RANDOM}
# A Fernet key: 32 random bytes, URL-safe base64.
export LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS=${LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS:-$(head -c 32 /dev/urandom | base64 | tr '+/' '-_')}
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-loopgrade-check}

files=(-f docker-compose.yml -f docker-compose.override.yml)
loopback=(-f docker-compose.yml -f deploy/compose.loopback.yml)
for set in files loopback; do
    declare -n chosen=$set
    "${compose[@]}" "${chosen[@]}" config --quiet
    services=$("${compose[@]}" "${chosen[@]}" config --services | sort | tr '\n' ' ')
    [ "$services" = "api postgres redis worker " ] || { say "unexpected services: $services"; exit 1; }
done
say "${compose[*]} config: valid ($services), with the override and with deploy/compose.loopback.yml"
[ "${1:-}" = "--up" ] || exit 0

if ! docker network inspect bridge >/dev/null 2>&1; then
    say "the engine has no bridge network: the stack on one loopback (deploy/compose.loopback.yml)"
    files=("${loopback[@]}")
fi
stack=("${compose[@]}" "${files[@]}")
scripts/build-stack-images.sh
export LOOPGRADE_PORT=${LOOPGRADE_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
down() { "${stack[@]}" down --volumes --timeout 30 >/dev/null 2>&1 || true; }
trap down EXIT
started=$(date +%s)
"${stack[@]}" up -d --scale worker=2
workers=$("${stack[@]}" ps -q worker | wc -l)
[ "$workers" -eq 2 ] || { say "$workers worker containers, not 2"; exit 1; }
key=$("${stack[@]}" exec -T api python3 -m app.cli keys create compose-check 2>/dev/null)
# The learner's client, in the api container: the reference solution, posted over HTTP to the
# api's own port, then its result polled until graded.
"${stack[@]}" exec -T api python3 - "$key" <<'PY'
import json, sys, time, urllib.request

base = "http://127.0.0.1:8000"
headers = {"Authorization": f"Bearer {sys.argv[1]}", "Content-Type": "application/json"}
code = open("exercises/train-step/solution.py").read()
body = json.dumps({"exercise": "train-step", "learner": "compose", "code": code}).encode()
request = urllib.request.Request(f"{base}/api/v1/submissions", body, headers, method="POST")
with urllib.request.urlopen(request, timeout=30) as response:
    assert response.status == 202, response.status
    location = response.headers["Location"]
deadline = time.monotonic() + 600
while True:
    poll = urllib.request.Request(base + location, headers=headers)
    with urllib.request.urlopen(poll, timeout=30) as response:
        result = json.load(response)
    if result["status"] in ("graded", "error"):
        break
    assert time.monotonic() < deadline, f"still {result['status']}"
    time.sleep(1)
print(f"check-compose: graded through the stack: {result['status']} {result['diagnosis']} "
      f"{result['score']}/{result['max_score']}", file=sys.stderr)
assert (result["status"], result["diagnosis"]) == ("graded", "correct"), result
PY
# An LMS on the stack's loopback, which the workers share: the fake LTI 1.3 platform of
# tests/lti (copied in: the image has no tests) launches a learner who submits in the page;
# the API grades nothing, so the score that reaches it is a worker's grade, sent by AGS.
# With a bridge network each container has a loopback of its own, which no worker shares.
if [ "${files[*]}" = "${loopback[*]}" ]; then
    "${stack[@]}" exec -T api sh -c 'mkdir -p /tmp/lms && cat >/tmp/lms/fake_platform.py' <tests/lti/fake_platform.py
    "${stack[@]}" exec -T api python3 - http://127.0.0.1:8000 /tmp/lms <scripts/check_lti_passback.py
    lms_submissions=1
else
    say "NOT checked: a worker's score reaching an LMS (only the loopback layout runs the fake LMS)"
    lms_submissions=0
fi
# Both workers consume the queue (up -d does not wait for them), and each submission was graded
# once. A worker's start-up takes seconds, or minutes beside CI's test passes.
ready=0
ready_by=$(($(date +%s) + 600))
while [ "$(date +%s)" -lt "$ready_by" ]; do
    ready=$("${stack[@]}" logs --no-color worker | grep -c 'ready\.$' || true)
    [ "$ready" -lt 2 ] || break
    sleep 1
done
[ "$ready" -eq 2 ] || { say "$ready of the 2 workers became ready"; exit 1; }
# Each worker grades from its warm pool (the entrypoint gave it its cgroups): its start-up line
# says every slot is ready, not "a cold sandbox per run".
warm=$("${stack[@]}" logs --no-color worker |
    grep -cE 'sandbox: bwrap with a warm pool: ([1-9][0-9]*) of \1 slots ready' || true)
if [ "$warm" -ne 2 ]; then
    say "$warm of the 2 workers started their warm pool; what they said:"
    "${stack[@]}" logs --no-color worker | grep -E 'sandbox|warm pool|entrypoint' >&2 || true
    exit 1
fi
# Each runs the settings' grading threads a slot of its pool (the default, which Compose keeps).
slots=$("${stack[@]}" logs --no-color worker | grep -oE 'warm pool: [0-9]+ of' | head -1 | tr -dc 0-9)
per_slot=$("${stack[@]}" exec -T api python3 -c 'from app.settings import WORKERS_PER_SLOT; print(WORKERS_PER_SLOT)')
threads=$("${stack[@]}" logs --no-color worker | grep -cE "concurrency: $((per_slot * slots)) \(thread\)" || true)
[ "$threads" -eq 2 ] || { say "$threads of the 2 workers run $per_slot threads a slot ($slots slots)"; exit 1; }
grades=$("${stack[@]}" logs --no-color worker | grep -c ': grading (exercise' || true)
submissions=$((1 + lms_submissions))
[ "$grades" -eq "$submissions" ] || { say "$submissions submissions were graded $grades times, not once each"; exit 1; }
say "stack up with 2 warm workers of $slots slots and $((per_slot * slots)) threads each and $submissions submissions graded (the LMS check: $lms_submissions) in $(($(date +%s) - started)) s"
