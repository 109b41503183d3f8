#!/usr/bin/env bash
# Builds the jar of reprocess.hadoop (PosixLocalFileSystem, and ConditionalLocalFileSystem for tests),
# reprocess.connect (StorePlugin, the warehouse's store calls of a Spark Connect client) and reprocess.landing
# (WellFormedLine, the landing contract's structural checks in one pass): build.sh PYTHON OUT_JAR
# Compiled against the jars of PYTHON's pyspark (needs javac and jar, a JDK 17). The one build of it: `make venv`
# (Makefile) and the image (docker/Dockerfile) both call this.
set -euo pipefail
python=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac --release 17 -Xlint:all,-classfile,-path -Werror -d "$classes" -cp "$jars/*" \
  "$here"/reprocess/hadoop/*.java "$here"/reprocess/connect/*.java "$here"/reprocess/landing/*.java
mkdir -p "$(dirname "$out")"
jar cf "$out" -C "$classes" .
