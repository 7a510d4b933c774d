#!/usr/bin/env bash
# The Docker engine that the docker sandbox backend (and its tests) use, on Debian.
#
#   scripts/docker-engine.sh start   install docker.io, runsc (gVisor) and debootstrap when
#                                    missing; unless an engine already answers, start dockerd
#                                    in the background and wait until it answers
#   scripts/docker-engine.sh stop    stop the dockerd that `start` started (by its pid), if any
#
# The engine gets no bridge network and touches no firewall rule (--bridge=none
# --iptables=false): sandbox containers have no network at all. gVisor's runsc is registered as
# the runtime `runsc` when installed. Its state (pid, log, daemon.json) is under build/dockerd/.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE=build/dockerd
PIDFILE=$STATE/dockerd.pid
WAIT_SECONDS=60

say() { echo "docker-engine: $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
answers() { docker version >/dev/null 2>&1; }

install_missing() {
    local wanted=()
    command -v dockerd >/dev/null || wanted+=(docker.io)
    command -v debootstrap >/dev/null || wanted+=(debootstrap)
    command -v runsc >/dev/null || wanted+=(runsc)
    if [ ${#wanted[@]} -gt 0 ]; then
        say "installing ${wanted[*]}"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${wanted[@]}" >/dev/null
    fi
}

start() {
    install_missing
    if answers; then
        say "an engine already answers; using it"
        return
    fi
    mkdir -p "$STATE"
    if command -v runsc >/dev/null; then
        # --network=none: the 2022 runsc of Debian 12 otherwise refuses containers that have no
        # network ("cannot run with network enabled in root network namespace").
        printf '{"runtimes": {"runsc": {"path": "%s", "runtimeArgs": ["--network=none"]}}}\n' \
            "$(command -v runsc)" >"$STATE/daemon.json"
    else
        echo '{}' >"$STATE/daemon.json"
    fi
    say "starting dockerd (log: $STATE/dockerd.log)"
    rm -f "$PIDFILE"
    # dockerd writes its own pid: $! would be this script's subshell, not dockerd.
    as_root setsid dockerd --pidfile "$PWD/$PIDFILE" --config-file "$STATE/daemon.json" \
        --bridge=none --iptables=false --ip6tables=false >"$STATE/dockerd.log" 2>&1 </dev/null &
    local starter=$!
    local waited=0
    until answers; do
        if ! kill -0 "$starter" 2>/dev/null && [ ! -s "$PIDFILE" ]; then
            say "dockerd exited:"; tail -n 20 "$STATE/dockerd.log" >&2; exit 1
        fi
        if [ $waited -ge $((WAIT_SECONDS * 10)) ]; then
            say "dockerd did not answer within $WAIT_SECONDS s"; tail -n 20 "$STATE/dockerd.log" >&2; exit 1
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    say "dockerd answers (pid $(cat "$PIDFILE"))"
}

stop() {
    [ -s "$PIDFILE" ] || return 0
    local pid
    pid=$(cat "$PIDFILE")
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || { rm -f "$PIDFILE"; return 0; }
    if kill -0 "$pid" 2>/dev/null; then
        say "stopping dockerd (pid $pid)"
        as_root kill -TERM "$pid"
        for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && as_root kill -KILL "$pid"
    fi
    rm -f "$PIDFILE"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
