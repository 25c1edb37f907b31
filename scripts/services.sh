# Sourced by ./test: install (apt-get, as root) and start what the tests need, when missing:
# Debian chromium for the browser tests, redis-server, PostgreSQL. Each is optional: a test that
# needs a service that could not be started is skipped with the reason, never silently passed.
srifty_apt() {
  command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ] || return 1
  if [ -z "${SRIFTY_APT_UPDATED:-}" ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    SRIFTY_APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
}

srifty_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

srifty_services() {
  local need=()
  [ -x /usr/bin/chromium ] || need+=(chromium)
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  command -v tc >/dev/null 2>&1 || need+=(iproute2)
  if [ ${#need[@]} -gt 0 ]; then
    echo "==> apt-get install ${need[*]}"
    srifty_apt "${need[@]}" || echo "    (could not install ${need[*]}; tests needing them will be skipped)"
  fi
  mkdir -p var/test-services
  # Redis on a private port, in the background; stopped when the test script exits.
  if command -v redis-server >/dev/null 2>&1; then
    local rport
    rport=$(srifty_free_port)
    redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
      --pidfile "$PWD/var/test-services/redis.pid" --logfile "$PWD/var/test-services/redis.log" >/dev/null
    export SRIFTY_TEST_REDIS_URL="redis://127.0.0.1:${rport}/0"
  fi
  # PostgreSQL: a throwaway cluster in var/, owned by an unprivileged user when run as root.
  local initdb pgbin pgdir=/tmp/srifty-pg-$$ pport pguser
  pport=$(srifty_free_port)
  initdb=$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n1 || true)
  if [ -n "$initdb" ]; then
    pgbin=$(dirname "$initdb")
    pguser=$(id -un)
    if [ "$(id -u)" = 0 ]; then pguser=postgres; id postgres >/dev/null 2>&1 || useradd -r postgres; fi
    mkdir -p "$pgdir" && chown "$pguser" "$pgdir"
    if runuser_or_self "$pguser" "$pgbin/initdb" -D "$pgdir/data" -U srifty --auth=trust >/dev/null 2>&1 &&
       runuser_or_self "$pguser" "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w \
         -o "-p $pport -k $pgdir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null 2>&1; then
      export SRIFTY_TEST_DATABASE_URL="postgres://srifty@127.0.0.1:${pport}/postgres"
      SRIFTY_PG_STOP="$pgbin/pg_ctl -D $pgdir/data -m fast stop"
      SRIFTY_PG_USER="$pguser"
      SRIFTY_PG_DIR="$pgdir"
    else
      echo "    (PostgreSQL did not start; see $pgdir/log)"
    fi
  fi
  trap srifty_services_stop EXIT
}

runuser_or_self() {
  local user="$1"; shift
  if [ "$(id -un)" = "$user" ]; then "$@"; else runuser -u "$user" -- "$@"; fi
}

srifty_services_stop() {
  [ -f var/test-services/redis.pid ] && kill "$(cat var/test-services/redis.pid)" 2>/dev/null || true
  [ -n "${SRIFTY_PG_STOP:-}" ] && runuser_or_self "$SRIFTY_PG_USER" $SRIFTY_PG_STOP >/dev/null 2>&1 || true
  [ -n "${SRIFTY_PG_DIR:-}" ] && rm -rf "$SRIFTY_PG_DIR" || true
}
