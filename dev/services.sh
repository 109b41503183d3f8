#!/usr/bin/env bash
# The services the tests need, checked and (where missing) started or installed from Debian.
set -euo pipefail
apt="$(dirname "$0")/apt.sh"  # one apt-get at a time, failing loudly
pg_up() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
need_apt=()
if ! command -v psql >/dev/null || ! command -v pg_isready >/dev/null; then need_apt+=(postgresql-client); fi
# the server where none runs on 5432 and none is installed (the client tools alone do not make one)
if ! pg_up && [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then need_apt+=(postgresql); fi
if ! command -v chromium >/dev/null; then need_apt+=(chromium); fi
if ! command -v rabbitmq-server >/dev/null && ! [ -x /usr/sbin/rabbitmq-server ]; then need_apt+=(rabbitmq-server); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "services: installing ${need_apt[*]} from Debian"
  bash "$apt" "${need_apt[@]}"
  command -v chromium >/dev/null || { echo "services: chromium is still not on PATH after the install" >&2; exit 1; }
fi
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  echo "services: starting PostgreSQL"
  # "already running" (a server still starting) is not an error: the wait below decides
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  for _ in $(seq 180); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
  pg_isready -h 127.0.0.1 -p 5432 -q \
    || { echo "services: PostgreSQL did not accept connections on 127.0.0.1:5432 (see /var/log/postgresql)" >&2; exit 1; }
fi
# -w: never ask for a password (on a terminal psql asked, and the setup waited for someone to press Enter)
pg_trusts() { psql -w -h 127.0.0.1 -U postgres -d postgres -Atc "select 1" >/dev/null 2>&1 </dev/null; }
if ! pg_trusts; then
  # Debian's own pg_hba.conf asks for a password on 127.0.0.1 (scram-sha-256): the tests log in as postgres without
  # one, so loopback connections of that user are trusted, in the first line (the first matching line decides).
  hba="$(su postgres -s /bin/sh -c "psql -Atc 'show hba_file'" 2>/dev/null || true)"
  if [ -n "$hba" ] && [ -w "$hba" ] && ! grep -q '^host all postgres 127.0.0.1/32 trust' "$hba"; then
    echo "services: trusting user postgres on 127.0.0.1 in $hba (the tests log in without a password; any local" \
      "process may then log in as postgres: delete that first line and reload PostgreSQL to undo)" >&2
    sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba"
    su postgres -s /bin/sh -c "psql -Atc 'select pg_reload_conf()'" >/dev/null
  fi
fi
if ! pg_trusts; then
  echo "services: PostgreSQL on 127.0.0.1:5432 does not accept user postgres without a password (trust auth)" >&2
  exit 1
fi
echo "services: PostgreSQL ready, chromium $(chromium --version 2>/dev/null | awk '{print $2}')"

# ActiveMQ Classic (Debian package) for the stomp:// target tests: an instance "reprocess" with only OpenWire
# (61616) and STOMP (61613) on loopback; Debian's default config would also want 5672 and 1883, which RabbitMQ
# and Mosquitto hold here.
amq_up() { (exec 3<>/dev/tcp/127.0.0.1/61613) 2>/dev/null; }
inst=/etc/activemq/instances-available/reprocess
if amq_up && [ -f "$inst/activemq.xml" ] && ! cmp -s "$(dirname "$0")/activemq/activemq.xml" "$inst/activemq.xml"; then
  echo "services: ActiveMQ runs an older configuration of ours: restarting it"
  SYSTEMCTL_SKIP_REDIRECT=1 /etc/init.d/activemq stop >/dev/null || true
  for _ in $(seq 180); do amq_up || break; sleep 1; done
  amq_up && { echo "services: could not stop ActiveMQ to apply dev/activemq/activemq.xml: stop it and re-run" >&2; exit 1; }
fi
if ! amq_up; then
  if [ ! -f /usr/share/activemq/bin/activemq.jar ]; then
    echo "services: installing activemq from Debian"
    bash "$apt" activemq
  fi
  mkdir -p "$inst"
  cp "$(dirname "$0")/activemq/activemq.xml" "$inst/activemq.xml"
  cp /etc/activemq/instances-available/main/log4j2.properties "$inst/" 2>/dev/null || true
  ln -sfn "$inst" /etc/activemq/instances-enabled/reprocess
  rm -f /etc/activemq/instances-enabled/main  # the default instance binds nothing we need
  echo "services: starting ActiveMQ (OpenWire 61616, STOMP 61613)"
  # the init script itself, not systemd's unit: the package's install started that unit with no instance enabled,
  # and a unit made from a script without a pidfile stays "active (exited)", so systemctl would start nothing
  SYSTEMCTL_SKIP_REDIRECT=1 /etc/init.d/activemq start >/dev/null || true
  for _ in $(seq 180); do amq_up && break; sleep 1; done
  amq_up || { echo "services: ActiveMQ did not open STOMP on 127.0.0.1:61613 (run SYSTEMCTL_SKIP_REDIRECT=1" \
    "/etc/init.d/activemq console reprocess to see why)" >&2; exit 1; }
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
  echo "services: starting RabbitMQ"
  PATH="$PATH:/usr/sbin" rabbitmq-server -detached || true
  for _ in $(seq 180); do (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && break; sleep 1; done
  (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null \
    || { echo "services: RabbitMQ did not open AMQP on 127.0.0.1:5672 (see /var/log/rabbitmq)" >&2; exit 1; }
fi
export PATH="$PATH:/usr/sbin"  # rabbitmqctl
# A RabbitMQ user that may publish to amq.topic only with routing keys under allowed.: the amqp:// target's test of a
# routing key the broker refuses (topic permissions) logs in as it.
if ! rabbitmqctl -q list_users 2>/dev/null | grep '^reprocess-limited' >/dev/null; then  # not -q: no SIGPIPE
  echo "services: adding RabbitMQ user reprocess-limited"
  rabbitmqctl -q add_user reprocess-limited limited >/dev/null
  rabbitmqctl -q set_permissions -p / reprocess-limited "" ".*" ".*" >/dev/null
  rabbitmqctl -q set_topic_permissions -p / reprocess-limited amq.topic '^allowed\..*' ".*" >/dev/null
fi
echo "services: ActiveMQ STOMP 127.0.0.1:61613, RabbitMQ 127.0.0.1:5672"

# An S3-compatible server for the tests of the readers of a warehouse on object storage (tests/test_s3_readers.py):
# moto in server mode, from PyPI, in a venv of its own (its botocore cannot share the project's pinned stack). The
# tests start and stop it on a free port; here it is only installed.
s3dir="$(cd "$(dirname "$0")/.." && pwd)/.s3server"
if [ ! -x "$s3dir/bin/moto_server" ] || ! cmp -s "$(dirname "$0")/../requirements/s3-server.txt" "$s3dir/requirements.txt"; then
  echo "services: installing the S3 test server (moto) into .s3server/"
  rm -rf "$s3dir"
  "$(command -v python3.11 || command -v python3)" -m venv "$s3dir"
  "$s3dir/bin/pip" install -q --disable-pip-version-check -r "$(dirname "$0")/../requirements/s3-server.txt"
  cp "$(dirname "$0")/../requirements/s3-server.txt" "$s3dir/requirements.txt"
fi
echo "services: S3 test server $("$s3dir/bin/python" -c 'import moto; print("moto", moto.__version__)')"
