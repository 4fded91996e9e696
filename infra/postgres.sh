#!/usr/bin/env bash
# Start a throwaway local PostgreSQL for tests and benchmarks, and print its URL.
#
#   eval "$(infra/postgres.sh start)"   # exports TEAMSTORE_TEST_DATABASE_URL
#   infra/postgres.sh stop
#   infra/postgres.sh status             # exit status 0 while it runs
#
# Tests run it with fsync off (fast, nothing to keep). TEAMSTORE_PG_DURABLE=1 keeps the production
# defaults (fsync, synchronous_commit on) on port 55433: the benchmarks measure against that one.
#
# Uses Debian's packaged server binaries (apt-get install postgresql). The server refuses to run as
# root, so when started as root it runs as the 'postgres' system user. Data lives in a temporary folder.
set -euo pipefail

DURABLE="${TEAMSTORE_PG_DURABLE:-0}"
if [[ "$DURABLE" == "1" ]]; then PGPORT="${TEAMSTORE_PGPORT:-55433}"; FSYNC=""; else PGPORT="${TEAMSTORE_PGPORT:-55432}"; FSYNC="-c fsync=off"; fi
PGDATA="${TEAMSTORE_PGDATA:-${TMPDIR:-/tmp}/teamstore-pg-$PGPORT}"

find_bin() {
  local name="$1"
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)"
  if [[ -n "$found" && -x "$found/$name" ]]; then echo "$found/$name"; return; fi
  echo "postgres.sh: '$name' not found; install it with: apt-get install -y postgresql" >&2
  exit 1
}

as_owner() {
  if [[ "$(id -u)" == "0" ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start() {
  local initdb pg_ctl
  initdb="$(find_bin initdb)"; pg_ctl="$(find_bin pg_ctl)"
  if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    mkdir -p "$PGDATA"
    [[ "$(id -u)" == "0" ]] && chown postgres:postgres "$PGDATA"
    as_owner "$initdb" -D "$PGDATA" -U postgres --auth=trust -E UTF8 >/dev/null
  fi
  if ! as_owner "$pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    as_owner "$pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" -w \
      -o "-p $PGPORT -k /tmp -c listen_addresses=127.0.0.1 $FSYNC -c max_connections=200" start >/dev/null
  fi
  echo "export TEAMSTORE_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:$PGPORT/postgres"
}

stop() {
  local pg_ctl
  pg_ctl="$(find_bin pg_ctl)"
  as_owner "$pg_ctl" -D "$PGDATA" -m fast stop >/dev/null 2>&1 || true
}

status() {
  local pg_ctl
  pg_ctl="$(find_bin pg_ctl)"
  as_owner "$pg_ctl" -D "$PGDATA" status >/dev/null 2>&1
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
