#!/usr/bin/env bash
# Runs a command as a systemd service with the sandbox settings test/ops/systemd-unit.test.ts reads from a unit
# would: inside a mount namespace of its own (unshare -m), so that nothing here is seen outside it.
#
#   systemd-sandbox.sh SCRATCH UID GID NO_NEW_PRIVS WORKDIR [provide SRC DEST]... [rw PATH]... [tmp] [home] -- CMD...
#
#   provide SRC DEST   the machine's DEST (/etc/memory-warden, /srv/agent, /usr/bin/node) is SRC from the test; a
#                      DEST that does not exist is made in an overlay of its nearest folder that does, the overlay's
#                      changes kept in SCRATCH (a tmpfs), never on the machine
#   rw PATH            ReadWritePaths= and StateDirectory=: writable; everything else is read-only (ProtectSystem=strict)
#   tmp                PrivateTmp=yes: a /tmp and /var/tmp of the service's own
#   home               ProtectHome=yes: /home, /root and /run/user empty and inaccessible
#
# Then CMD runs in WORKDIR as UID:GID (setpriv, with --no-new-privs when NO_NEW_PRIVS is 1) with the environment
# this script was given. Run as root (mount namespaces).
set -euo pipefail
scratch=$1 uid=$2 gid=$3 nnp=$4 workdir=$5
shift 5
provides=() rws=() tmp=0 home=0
while [ $# -gt 0 ]; do
  case $1 in
    provide) provides+=("$2" "$3"); shift 3 ;;
    rw) rws+=("$2"); shift 2 ;;
    tmp) tmp=1; shift ;;
    home) home=1; shift ;;
    --) shift; break ;;
    *) echo "systemd-sandbox: unknown argument $1" >&2; exit 2 ;;
  esac
done

mount --make-rprivate /
mount -t tmpfs -o mode=0700 sandbox "$scratch"
overlays=0
make_point() { # make_point DEST KIND: DEST made (a folder, or a file) in an overlay of its nearest existing folder
  local dest=$1 kind=$2 parent
  parent=$(dirname "$dest")
  while [ ! -e "$parent" ]; do parent=$(dirname "$parent"); done
  overlays=$((overlays + 1))
  mkdir -p "$scratch/o$overlays/up" "$scratch/o$overlays/work"
  mount -t overlay overlay -o "lowerdir=$parent,upperdir=$scratch/o$overlays/up,workdir=$scratch/o$overlays/work" "$parent"
  if [ "$kind" = file ]; then mkdir -p "$(dirname "$dest")" && touch "$dest"; else mkdir -p "$dest"; fi
}
for ((i = 0; i < ${#provides[@]}; i += 2)); do
  src=${provides[i]} dest=${provides[i + 1]}
  if [ ! -e "$dest" ]; then if [ -d "$src" ]; then make_point "$dest" dir; else make_point "$dest" file; fi; fi
  mount --bind "$src" "$dest"
done
if [ "$tmp" = 1 ]; then
  mount -t tmpfs -o mode=1777 private-tmp /tmp
  mount -t tmpfs -o mode=1777 private-var-tmp /var/tmp
  rws+=(/tmp /var/tmp)
fi
if [ "$home" = 1 ]; then
  for d in /home /root /run/user; do [ -d "$d" ] && mount -t tmpfs -o mode=000,ro protect-home "$d"; done
fi

# ProtectSystem=strict: every mount read-only but the kernel's API file systems (/proc, /sys, /dev)...
unescape() { printf '%b' "${1//\\/\\0}"; }
awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r m; do
  m=$(unescape "$m")
  case $m in /proc | /proc/* | /sys | /sys/* | /dev | /dev/*) continue ;; esac
  mount -o remount,bind,ro "$m" 2>/dev/null || { mountpoint -q "$m" && { echo "systemd-sandbox: cannot make $m read-only" >&2; exit 1; }; }
done
# ... then what the unit names writable.
for p in "${rws[@]}"; do
  mount --bind "$p" "$p"
  mount -o remount,bind,rw "$p"
done

cd "$workdir"
flags=(--reuid "$uid" --regid "$gid" --clear-groups)
[ "$nnp" = 1 ] && flags+=(--no-new-privs)
exec setpriv "${flags[@]}" -- "$@"
