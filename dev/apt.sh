#!/usr/bin/env bash
# Installs Debian packages for the development setup (dev/jdk.sh, dev/python.sh, dev/services.sh), one apt-get at a
# time: `make test` prepares side by side, and apt-get refuses to run while another holds dpkg's lock (as a fresh
# VM's unattended-upgrades may for minutes after boot), so the second install failed at once. Fails, naming the
# packages, when the package lists cannot be updated or a package cannot be installed.
# Usage: dev/apt.sh PACKAGE...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: dev/apt.sh PACKAGE..." >&2; exit 2; }
# apt-get's refusal to a user who is not root ("Unable to lock directory") reads like another apt holding the lock:
# it was retried for ten minutes
[ "$EUID" = 0 ] || { echo "apt: installing $* needs root (run as root, or install them first)" >&2; exit 1; }
lock=/var/lock/reprocess-apt.lock
# our own installs, in turn; an existing lock file is opened without creating it (Debian's fs.protected_regular
# refuses even root a create-open of another user's file in the sticky /var/lock)
if [ -e "$lock" ]; then exec 9<"$lock"; else exec 9>"$lock"; fi
flock 9
export DEBIAN_FRONTEND=noninteractive
# anyone else's: dpkg's lock is waited for by apt-get install itself, the package lists' lock (apt-daily's update
# holds it) by trying again, for up to ten minutes
for try in $(seq 60); do
  if out="$(apt-get update -qq 2>&1)"; then
    break
  fi
  if [ "$try" = 60 ] || ! grep -qi "could not get lock\|unable to lock" <<<"$out"; then
    echo "$out" >&2
    echo "apt: apt-get update failed: cannot install $*" >&2
    exit 1
  fi
  sleep 10
done
apt-get install -o DPkg::Lock::Timeout=600 -y -qq "$@" >/dev/null \
  || { echo "apt: apt-get could not install $*" >&2; exit 1; }
