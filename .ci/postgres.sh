#!/usr/bin/env bash
# Install and start PostgreSQL from Debian's packages, create a test database and user, and
# print the URL the service tests use:  eval "$(.ci/postgres.sh)"  sets CUBINFORGE_TEST_PG_URL.
# Run as root (CI is). Idempotent: a second run reuses the running cluster.
# Everything but the final export line goes to stderr, so `eval` sees only that line.
set -euo pipefail
exec 3>&1 1>&2

DB=${CUBINFORGE_PG_DB:-cubinforge_test}
USER_=${CUBINFORGE_PG_USER:-cubinforge}
PASS=${CUBINFORGE_PG_PASSWORD:-cubinforge}
PORT=${CUBINFORGE_PG_PORT:-5432}

if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
VER=$(basename "$(dirname "$BIN")")

# Prefer the Debian cluster tooling; fall back to a private data dir where it is missing.
SOCK=/var/run/postgresql
if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$VER main" || pg_createcluster "$VER" main --port "$PORT" >/dev/null
    pg_ctlcluster "$VER" main start 2>/dev/null || true
else
    DATA=/var/lib/postgresql/cubinforge-ci
    SOCK=/tmp
    if [ ! -s "$DATA/PG_VERSION" ]; then
        install -d -o postgres -g postgres "$DATA"
        su postgres -c "$BIN/initdb -D $DATA -A trust" >/dev/null
    fi
    su postgres -c "$BIN/pg_ctl -D $DATA -o '-p $PORT -k /tmp' -l $DATA/log -w start" >/dev/null || true
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
