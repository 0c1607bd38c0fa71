#!/usr/bin/env bash
# What the test suite needs beside Node, brought by `npm test` itself (npm runs this as `pretest`): the Debian
# packages whose programs the tests start on loopback, and the services they talk to. Run on a fresh machine it
# installs and starts them; run again it finds them and does nothing. It reads and writes nothing of the checkout.
#
#   redis-server, redis-cli, redis-sentinel   the queue; Sentinel, Cluster and TLS set-ups (test/helpers/redis-servers.ts)
#   sshd                                      the SFTP snapshot target (test/helpers/sshd.ts)
#   chromium                                  the review page, driven by playwright-core (executablePath /usr/bin/chromium)
#   prometheus, promtool                      the alert rules, checked, unit-tested and fired (test/ops/)
#   sqlite3, git, openssl                     baselines, the git verifier, TLS certificates
#   postgresql                                the PostgreSQL store engine's tests (127.0.0.1:5432, trust auth)
#
# MEMORY_WARDEN_TEST_SERVICES=0 skips it (a machine set up some other way).
set -euo pipefail
[ "${MEMORY_WARDEN_TEST_SERVICES:-1}" = 0 ] && exit 0

missing=()
need() { # need PACKAGE TEST...: the package when the test fails
  local pkg=$1; shift
  "$@" >/dev/null 2>&1 || missing+=("$pkg")
}
need redis-server   command -v redis-server
need redis-tools    command -v redis-cli
need redis-sentinel command -v redis-sentinel
need openssh-server test -x /usr/sbin/sshd
need chromium       test -x /usr/bin/chromium
need prometheus     bash -c 'command -v prometheus && command -v promtool'
need sqlite3        command -v sqlite3
need git            command -v git
need openssl        command -v openssl
need postgresql     bash -c 'ls /usr/lib/postgresql/*/bin/postgres'

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"
  else return 1
  fi
}

if [ ${#missing[@]} -gt 0 ]; then
  echo "test services: installing ${missing[*]} (Debian packages)" >&2
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "test services: no apt-get here; install ${missing[*]} yourself, then run npm test again" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! { as_root apt-get update -qq && as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    echo "test services: could not install ${missing[*]} (needs root or passwordless sudo); install them, then run npm test again" >&2
    exit 1
  fi
fi

# Redis on 127.0.0.1:6379, shared by the tests (each test uses its own key prefix); it keeps nothing on disk.
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "test services: starting redis-server on 127.0.0.1:6379" >&2
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /tmp >/dev/null
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || { echo "test services: redis-server did not start on 127.0.0.1:6379" >&2; exit 1; }
fi

# PostgreSQL on 127.0.0.1:5432 with trust auth for local connections: Debian's cluster, started where it is not.
pg_ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if ! pg_ready; then
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  if [ -z "$version" ]; then
    echo "test services: PostgreSQL is installed but has no cluster (pg_createcluster); the PostgreSQL tests need one on 127.0.0.1:5432" >&2
    exit 1
  fi
  echo "test services: starting PostgreSQL $version on 127.0.0.1:5432" >&2
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start >/dev/null 2>&1 || true
  for _ in $(seq 1 100); do pg_ready && break; sleep 0.1; done
  pg_ready || { echo "test services: PostgreSQL did not start on 127.0.0.1:5432" >&2; exit 1; }
fi
exit 0
