#!/usr/bin/env bash
# What the test suite needs beside Node, brought by `npm test` itself (npm runs this as `pretest`): the programs the
# tests start on loopback, and the services they talk to. Run on a fresh machine it installs and starts them; run
# again it finds them and does nothing. It reads and writes nothing of the checkout.
#
# Each `need PACKAGE PROGRAM...` line names a Debian package and the programs of it the tests start (a name looked up
# on PATH, or an absolute path); test/test-services.test.ts fails when a test starts a program no line here names
# (Debian's Essential packages aside: bash, coreutils, grep, bsdutils):
#
#   redis-server, redis-cli, redis-sentinel   the queue; Sentinel, Cluster and TLS set-ups (test/helpers/redis-servers.ts)
#   sshd, ssh-keygen                          the SFTP snapshot target (test/helpers/sshd.ts)
#   chromium                                  the review page, driven by playwright-core (executablePath /usr/bin/chromium)
#   prometheus, promtool                      the alert rules, checked, unit-tested and fired (test/ops/)
#   sqlite3, git, openssl                     baselines, the git verifier, TLS certificates
#   age, age-keygen                           the reference age implementation snapshot encryption is checked against
#   systemd-analyze, mount                    the systemd unit of docs/worker.md, verified and run in its sandbox (test/ops/)
#   postgresql                                PostgreSQL on 127.0.0.1:5432 (trust auth)
#   moto_server                               moto's S3 server, one of the S3 targets the snapshot contract runs
#                                             against (test/helpers/moto-s3.ts): not in Debian; from PyPI with pip
#
# MEMORY_WARDEN_TEST_SERVICES=0 skips it (a machine set up some other way).
set -euo pipefail
[ "${MEMORY_WARDEN_TEST_SERVICES:-1}" = 0 ] && exit 0

missing=()
missing_pip=()
has() { # has PROGRAM: on PATH, or an absolute path (a glob) that exists
  case $1 in
    /*) compgen -G "$1" >/dev/null ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}
need() { # need PACKAGE PROGRAM...: the Debian package when one of its programs is not there
  local pkg=$1 p; shift
  for p in "$@"; do has "$p" || { missing+=("$pkg"); return 0; }; done
}
need_pip() { # need_pip REQUIREMENT PROGRAM...: the same, from PyPI
  local req=$1 p; shift
  for p in "$@"; do has "$p" || { missing_pip+=("$req"); return 0; }; done
}
need redis-server   redis-server
need redis-tools    redis-cli
need redis-sentinel redis-sentinel
need openssh-server /usr/sbin/sshd ssh-keygen
need chromium       /usr/bin/chromium
need prometheus     prometheus promtool
need sqlite3        sqlite3
need git            git
need openssl        openssl
need age            age age-keygen
need systemd        systemd-analyze
need mount          mount
need postgresql     '/usr/lib/postgresql/*/bin/postgres' pg_ctlcluster pg_isready
need_pip 'moto[server]==5.2.1' moto_server
# pip itself, from Debian, when something is to come from PyPI
if [ ${#missing_pip[@]} -gt 0 ] && ! python3 -m pip --version >/dev/null 2>&1; then missing+=(python3-pip); fi

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

# moto is not packaged by Debian: pip installs it where PyPI (or the index pip is configured with) is reachable, for
# every user where it can (its program then lands on PATH, /usr/local/bin), else for this one (~/.local/bin).
if [ ${#missing_pip[@]} -gt 0 ]; then
  echo "test services: installing ${missing_pip[*]} (pip)" >&2
  pip_install() { python3 -m pip install --quiet "$@" "${missing_pip[@]}" >/dev/null 2>&1 || python3 -m pip install --quiet --break-system-packages "$@" "${missing_pip[@]}" >/dev/null 2>&1; }
  if ! { as_root bash -c "$(declare -p missing_pip); $(declare -f pip_install); pip_install" || pip_install --user; }; then
    echo "test services: could not install ${missing_pip[*]} with pip; install it (python3 -m pip install --user ${missing_pip[*]}), then run npm test again" >&2
    exit 1
  fi
  hash -r
  for p in moto_server; do
    has "$p" || { echo "test services: $p was installed but is not on PATH (pip's user folder: $(python3 -m site --user-base)/bin); add it to PATH, then run npm test again" >&2; exit 1; }
  done
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
