#!/usr/bin/env bash
# PostgreSQL and Redis for the tests, each its own process on a loopback port, state in DIR.
#
#   scripts/test-services.sh start DIR   install postgresql and redis-server when missing,
#                                        start both, print the env lines to export:
#                                        LOOPGRADE_TEST_POSTGRES_URL, LOOPGRADE_TEST_REDIS_URL
#   scripts/test-services.sh stop DIR    stop what `start DIR` started, remove DIR
#
# The cluster is created by initdb in DIR (PostgreSQL refuses root, so as root it belongs to
# the postgres user) with fsync off: test data need not survive a power cut. Nothing system-wide
# is touched: no pg_ctlcluster, no service, no other cluster's port.
set -euo pipefail

say() { echo "test-services: $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

install_missing() {
    local wanted=()
    [ -n "$(pg_bin)" ] || wanted+=(postgresql)
    command -v redis-server >/dev/null || wanted+=(redis-server)
    if [ ${#wanted[@]} -gt 0 ]; then
        say "installing ${wanted[*]}"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${wanted[@]}" >/dev/null
    fi
}

as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start() {
    local dir=$1
    install_missing
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    # DIR and its parents must be reachable by the postgres user (mktemp -d makes 0700).
    [ "$(id -u)" -ne 0 ] || { chown postgres "$dir"; chmod 0755 "$dir"; }
    local bin pg_port redis_port
    bin=$(pg_bin)
    pg_port=$(free_port)
    as_postgres "$bin/initdb" --pgdata "$dir/pg" --username=postgres --auth=trust \
        --encoding=UTF8 --no-sync >"$dir/initdb.log"
    as_postgres "$bin/pg_ctl" --pgdata "$dir/pg" --log "$dir/pg.log" --wait \
        --options "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$dir \
-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
        start >/dev/null
    redis_port=$(free_port)
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
        --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
    for _ in $(seq 100); do
        redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis-cli -p "$redis_port" ping >/dev/null || { say "redis-server did not start"; exit 1; }
    say "PostgreSQL on 127.0.0.1:$pg_port, Redis on 127.0.0.1:$redis_port (state in $dir)"
    echo "LOOPGRADE_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:$pg_port/postgres"
    echo "LOOPGRADE_TEST_REDIS_URL=redis://127.0.0.1:$redis_port/0"
}

stop() {
    local dir=$1
    [ -d "$dir" ] || return 0
    if [ -f "$dir/pg/postmaster.pid" ]; then
        as_postgres "$(pg_bin)/pg_ctl" --pgdata "$dir/pg" --mode=fast --wait stop >/dev/null || true
    fi
    if [ -f "$dir/redis.pid" ]; then
        local pid
        pid=$(cat "$dir/redis.pid")
        kill "$pid" 2>/dev/null || true
        # Redis writes its last log lines while it exits: removing the directory before it is
        # gone left it behind ("Directory not empty").
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$dir"
}

case "${1:-}" in
start) start "${2:?usage: $0 start DIR}" ;;
stop) stop "${2:?usage: $0 stop DIR}" ;;
*) echo "usage: $0 start DIR | stop DIR" >&2; exit 2 ;;
esac
