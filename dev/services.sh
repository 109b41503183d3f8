#!/usr/bin/env bash
# The services the tests need, checked and (where missing) started or installed from Debian.
set -euo pipefail
need_apt=()
if ! command -v psql >/dev/null || ! command -v pg_isready >/dev/null; then need_apt+=(postgresql postgresql-client); fi
if ! command -v chromium >/dev/null; then need_apt+=(chromium); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "services: installing ${need_apt[*]} from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  echo "services: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
  for _ in $(seq 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1" >/dev/null 2>&1; then
  echo "services: PostgreSQL on 127.0.0.1:5432 does not accept user postgres without a password (trust auth)" >&2
  exit 1
fi
echo "services: PostgreSQL ready, chromium $(chromium --version 2>/dev/null | awk '{print $2}')"
