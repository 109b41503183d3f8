#!/usr/bin/env bash
# Installs Debian packages for the development setup (dev/jdk.sh, dev/python.sh, dev/services.sh), one apt-get at a
# time: `make test` prepares side by side, and apt-get refuses to run while another holds dpkg's lock (as a fresh
# VM's unattended-upgrades may for minutes after boot), so the second install failed at once. Fails, naming the
# packages, when the package lists cannot be updated or a package cannot be installed.
# Usage: dev/apt.sh PACKAGE...
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: dev/apt.sh PACKAGE..." >&2; exit 2; }
exec 9>/var/lock/reprocess-apt.lock
flock 9  # our own installs, in turn
wait_lock=(-o DPkg::Lock::Timeout=600)  # anyone else's (apt 1.9.11+: dpkg's lock and the lists' lock)
export DEBIAN_FRONTEND=noninteractive
apt-get "${wait_lock[@]}" update -qq || { echo "apt: apt-get update failed: cannot install $*" >&2; exit 1; }
apt-get "${wait_lock[@]}" install -y -qq "$@" >/dev/null || { echo "apt: apt-get could not install $*" >&2; exit 1; }
