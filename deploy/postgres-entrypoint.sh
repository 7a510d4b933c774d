#!/bin/sh
# First start: a cluster in $PGDATA (the volume) with the database and user of POSTGRES_DB,
# POSTGRES_USER and POSTGRES_PASSWORD, reachable over the network with a password only.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    password_file=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$password_file"
    initdb --pgdata "$PGDATA" --username "$POSTGRES_USER" --pwfile "$password_file" \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 >/dev/null
    rm -f "$password_file"
    echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
    pg_ctl --pgdata "$PGDATA" --options "-c listen_addresses=''" --wait start >/dev/null
    createdb --username "$POSTGRES_USER" "$POSTGRES_DB"
    pg_ctl --pgdata "$PGDATA" --mode=fast --wait stop >/dev/null
fi
exec postgres -c listen_addresses='*' -c max_connections=200
