#!/usr/bin/env bash
# Install and start PostgreSQL from Debian's packages, create a test database and user, and
# print the URL the service tests use:  eval "$(.ci/postgres.sh)"  sets CUBINFORGE_TEST_PG_URL
# (and CUBINFORGE_PG_STOP, the command that stops the server again).
# Run as root (CI is). Idempotent: a second run reuses the running cluster.
# Everything but the final export line goes to stderr, so `eval` sees only that line.
#
# The server is a daemon that outlives this script. It must not inherit any of our output
# descriptors: a daemon holding the caller's pipe open makes `$(...)` (and a CI runner reading
# our output) wait for an EOF that never comes. Session 1's CI hung exactly so, after
# "Removed stale pid file.". Every command that may start the server therefore runs through
# `detached`, with stdin/stdout/stderr on files and fd 3 closed.
set -euo pipefail
exec 3>&1 1>&2

START_LOG=${CUBINFORGE_PG_START_LOG:-/tmp/cubinforge-pg-start.log}
detached() { "$@" </dev/null >>"$START_LOG" 2>&1 3>&-; }

DB=${CUBINFORGE_PG_DB:-cubinforge_test}
USER_=${CUBINFORGE_PG_USER:-cubinforge}
PASS=${CUBINFORGE_PG_PASSWORD:-cubinforge}
PORT=${CUBINFORGE_PG_PORT:-5432}

if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    # The package's postinst starts a cluster: detached too.
    detached apt-get update -qq
    detached apt-get install -y -qq --no-install-recommends postgresql
fi
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
VER=$(basename "$(dirname "$BIN")")

# Prefer the Debian cluster tooling; fall back to a private data dir where it is missing.
SOCK=/var/run/postgresql
if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$VER main" || detached pg_createcluster "$VER" main --port "$PORT"
    detached pg_ctlcluster "$VER" main start || true
    STOP="pg_ctlcluster $VER main stop"
else
    DATA=/var/lib/postgresql/cubinforge-ci
    SOCK=/tmp
    if [ ! -s "$DATA/PG_VERSION" ]; then
        install -d -o postgres -g postgres "$DATA"
        detached su postgres -c "$BIN/initdb -D $DATA -A trust"
    fi
    detached su postgres -c "$BIN/pg_ctl -D $DATA -o '-p $PORT -k /tmp' -l $DATA/log -w start" || true
    STOP="su postgres -c '$BIN/pg_ctl -D $DATA -m fast stop'"
fi

PSQL="psql -h $SOCK -p $PORT -v ON_ERROR_STOP=1 -tA"
for _ in $(seq 1 60); do
    su postgres -c "$PSQL -c 'select 1'" >/dev/null 2>&1 && break
    sleep 0.5
done
su postgres -c "$PSQL -c \"select 1 from pg_roles where rolname='$USER_'\"" | grep -q 1 || \
    su postgres -c "$PSQL -c \"create role $USER_ login password '$PASS'\""
su postgres -c "$PSQL -c \"select 1 from pg_database where datname='$DB'\"" | grep -q 1 || \
    su postgres -c "$PSQL -c \"create database $DB owner $USER_\""

echo "export CUBINFORGE_TEST_PG_URL=postgresql+psycopg://$USER_:$PASS@127.0.0.1:$PORT/$DB" >&3
printf 'export CUBINFORGE_PG_STOP=%q\n' "$STOP" >&3
