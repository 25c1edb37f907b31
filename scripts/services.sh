# Sourced by ./test: install (apt-get, as root) and start what the tests need, when missing:
# Debian chromium for the browser tests, redis-server, PostgreSQL. Locally each is optional: a
# test that needs a service that could not be started is skipped with the reason. Under CI=true
# a service that cannot be installed or started fails the run (srifty_services_required): a
# green CI must never hide skipped browser, Redis or PostgreSQL tests.
srifty_apt() {
  command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ] || return 1
  # Another install may hold dpkg's lock (an unattended upgrade, a parallel session): wait for it
  # up to 5 minutes (DPkg::Lock::Timeout, seconds), then try the whole install once more.
  local try
  for try in 1 2; do
    if [ -z "${SRIFTY_APT_UPDATED:-}" ]; then
      apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null 2>&1 && SRIFTY_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
      --no-install-recommends "$@" >/dev/null 2>&1 && return 0
    echo "    (apt-get install $* failed (try $try); retrying after the lock and a fresh update)"
    SRIFTY_APT_UPDATED=
    sleep 10
  done
  return 1
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
    # Exported only once it answers PING (a daemonised redis-server returns before it listens).
    if redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
      --pidfile "$PWD/var/test-services/redis.pid" --logfile "$PWD/var/test-services/redis.log" >/dev/null; then
      local i
      for i in $(seq 50); do
        redis-cli -p "$rport" ping >/dev/null 2>&1 && break
        sleep 0.1
      done
      if redis-cli -p "$rport" ping >/dev/null 2>&1; then
        export SRIFTY_TEST_REDIS_URL="redis://127.0.0.1:${rport}/0"
      else
        echo "    (redis-server did not answer; see var/test-services/redis.log)"
      fi
    fi
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
  srifty_services_required
}

# Under CI=true every service is required: fail now, naming what is missing, rather than let the
# tests that need it skip.
srifty_services_required() {
  [ "${CI:-}" = true ] || return 0
  local missing=()
  [ -x /usr/bin/chromium ] || missing+=("chromium (browser tests)")
  [ -n "${SRIFTY_TEST_REDIS_URL:-}" ] || missing+=("redis-server (channel-layer tests)")
  [ -n "${SRIFTY_TEST_DATABASE_URL:-}" ] || missing+=("PostgreSQL (the PostgreSQL pass)")
  if [ ${#missing[@]} -gt 0 ]; then
    echo "==> CI=true and these services could not be installed or started: ${missing[*]}" >&2
    echo "    (locally, without CI=true, their tests would be skipped with the reason)" >&2
    exit 1
  fi
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
