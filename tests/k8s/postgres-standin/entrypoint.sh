#!/bin/sh
# First start: a cluster owned by POSTGRES_USER with POSTGRES_PASSWORD (scram over TCP), the
# database POSTGRES_DB, then every /docker-entrypoint-initdb.d/*.sql; then serve.
set -eu
: "${POSTGRES_PASSWORD:?the official image refuses to start without a password; so does this one}"
user=${POSTGRES_USER:-postgres}
database=${POSTGRES_DB:-$user}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  chmod 700 "$PGDATA"
  password_file=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$password_file"
  initdb --pgdata="$PGDATA" --username="$user" --pwfile="$password_file" \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$password_file"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl --pgdata="$PGDATA" --options="-c listen_addresses=''" --wait start >/dev/null
  if [ "$database" != postgres ]; then
    psql --username="$user" --dbname=postgres --set=ON_ERROR_STOP=1 \
      --command="CREATE DATABASE \"$database\"" >/dev/null
  fi
  for script in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$script" ] || continue
    psql --username="$user" --dbname="$database" --set=ON_ERROR_STOP=1 --file="$script" >/dev/null
    echo "ran $script"
  done
  pg_ctl --pgdata="$PGDATA" --mode=fast --wait stop >/dev/null
fi
exec postgres -c listen_addresses='*'
