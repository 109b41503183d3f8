#!/usr/bin/env bash
# The tests need a JDK, not only a JRE: `make venv` compiles the local filesystem's jar with javac
# (spark/java/reprocess/hadoop/PosixLocalFileSystem.java; tests/test_local_fs.py checks it is used).
# Installs Debian's openjdk-17-jdk-headless when javac is missing; exits 10 when it installed it, so the caller
# knows to build the jar again. Runs before the other preparation (see `make test`), not beside it.
set -euo pipefail
if command -v javac >/dev/null; then
  exit 0
fi
echo "jdk: no javac on PATH; installing openjdk-17-jdk-headless from Debian"
case "$0" in */*) here="${0%/*}" ;; *) here=. ;; esac  # no dirname: the tests run this on a bare PATH
bash "$here/apt.sh" openjdk-17-jdk-headless
command -v javac >/dev/null || { echo "jdk: javac still not on PATH after the install" >&2; exit 1; }
exit 10
