#!/usr/bin/env bash
# `make venv` needs Python 3.11 with its venv module (ensurepip). Debian 12's python3.11 comes without it
# (python3.11-venv), and a minimal image without Python at all: both are installed from Debian when missing.
# Usage: dev/python.sh PYTHON (the interpreter the Makefile uses, python3.11 by default).
set -euo pipefail
py="${1:-python3.11}"
if command -v "$py" >/dev/null && "$py" -c "import ensurepip, venv" 2>/dev/null; then
  exit 0
fi
if [ "$py" != "python3.11" ] || ! command -v apt-get >/dev/null; then
  echo "python: need $py (Python 3.11) with its venv module on PATH" >&2
  exit 1
fi
echo "python: installing python3.11 and python3.11-venv from Debian"
case "$0" in */*) here="${0%/*}" ;; *) here=. ;; esac  # no dirname: the tests run this on a bare PATH
bash "$here/apt.sh" python3.11 python3.11-venv
"$py" -c "import ensurepip, venv" || { echo "python: $py still has no venv module after the install" >&2; exit 1; }
