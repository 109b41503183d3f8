# reprocess: `make demo` runs the main job end to end, `make test` runs every test.
# Both create .venv on first use (3 to 9 minutes) and skip the install when it is current.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARCHIVE := $(VENV)/share/reprocess/spark-driver.jsa
LOCAL_FS := $(VENV)/.local-fs
LOCAL_FS_JAR := $(VENV)/share/reprocess/reprocess-hadoop.jar
LOCAL_FS_SRC := $(wildcard spark/java/reprocess/*/*.java)
PYSPARK_VERSION := 4.3.0

export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(BIN)/python
export PATH := $(CURDIR)/$(BIN):$(PATH)

.DEFAULT_GOAL := help
.PHONY: help venv test test-prep test-unit test-slow bench demo demo-cli airflow connect-server services lint typecheck lock clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml requirements/constraints.txt
	@test -x $(BIN)/python || bash dev/python.sh $(PY)
	@# a JDK, not only a JRE (javac builds the local filesystem's jar); jdk.sh returns at once when javac is there.
	@# Where it cannot install one (not root), a JRE runs everything: the jar is only an optimisation.
	@bash dev/jdk.sh || test $$? -eq 10 || command -v java >/dev/null
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@# --no-compile: byte-compiling every installed module costs ~35 s; Python compiles what it imports instead.
	$(BIN)/pip install -q --disable-pip-version-check --no-compile -c requirements/constraints.txt -e '.[airflow,dev]'
	@# STACK.md trap 1: the Spark provider's pyspark-client overwrites pyspark's files; reinstall pyspark last.
	$(BIN)/pip install -q --disable-pip-version-check --no-compile --force-reinstall --no-deps pyspark==$(PYSPARK_VERSION)
	@# Then compiled once, in parallel: these machines set PYTHONDONTWRITEBYTECODE=1, so Python never caches what it
	@# compiles and every process (a CLI run, spark-submit, each Airflow task) compiled its imports again. Measured
	@# (bench/RESULTS.md, thirty-fifth run): importing Airflow 6.2 -> 2.4 CPU-s, Great Expectations 14 -> 5.9, a
	@# cold 120-message cycle 59 -> 49 CPU-s; this step costs about 53 CPU-s (28 s on 2 cores).
	@# Not the packages' own test folders nor pip (a quarter of the files): nothing here imports them.
	$(BIN)/python -m compileall -q -j 0 -x '/(tests|pip)/' $(VENV)/lib >/dev/null
	@touch $(STAMP)

# Hadoop's file: filesystem without a chmod process per file and folder written (reprocess.spark_env.local_fs_conf),
# compiled against the wheel's Hadoop. Only an optimisation: without a JDK's javac every run still works, with
# Hadoop's own. Built before the archive, which is only valid for the class path it was recorded with.
$(LOCAL_FS): $(STAMP) $(LOCAL_FS_SRC) spark/java/build.sh
	@rm -f $(LOCAL_FS_JAR)
	@if command -v javac >/dev/null && command -v jar >/dev/null; then \
	  bash spark/java/build.sh $(BIN)/python $(LOCAL_FS_JAR) \
	  || { rm -f $(LOCAL_FS_JAR); echo "warning: spark/java/reprocess/hadoop did not build: Spark keeps Hadoop's local filesystem"; }; \
	else echo "warning: no javac (a JDK 17): Spark keeps Hadoop's local filesystem, a chmod process per file"; fi
	@touch $(LOCAL_FS)

# The driver JVM's class-data archive (reprocess jvm-archive): drivers map it instead of loading ~16,000 classes
# from the jars. It is only an optimisation: if recording fails, every run still works, only slower to start.
$(ARCHIVE): $(STAMP) $(LOCAL_FS)
	@echo "recording the Spark driver's class-data archive (reprocess jvm-archive, about a minute)"
	@$(BIN)/python -m reprocess.cli jvm-archive --out $(ARCHIVE) > /dev/null 2> $(VENV)/jvm-archive.log \
	  || { rm -f $(ARCHIVE) $(ARCHIVE).json; echo "warning: no class-data archive (see $(VENV)/jvm-archive.log); runs start slower"; }

venv: $(STAMP) $(LOCAL_FS) $(ARCHIVE) ## create or update .venv (pinned stack from requirements/constraints.txt)

# The JVMs the tests start (Spark drivers, spark-submit, the cluster, the Connect server) compile with C1 only: they
# live for seconds on tiny data, where C2's optimising compiles are CPU spent for nothing, taken from the other test
# worker on a 2-core machine (the crash and fault-injection tests took 299 s instead of 395 s; in-process tests did
# not change). It changes no result, only how soon bytecode is compiled; deployments keep the JVM's defaults.
# They also use the serial collector and no perf-data file: their heaps are small, and G1's concurrent threads and
# barriers cost CPU the other worker wants. Measured side by side, file pairs at -n 2: crash+fault 277 -> 261 s,
# object store+concurrency 298 -> 280 s, cycle e2e+steps 295 -> 260 s (CPU 565 -> 488 s).
# C1 alone also shrinks the code cache to 48 MB (the JVM's size without tiers; 240 MB with them): the tests' long-lived
# Spark Connect server filled it after a minute of cycles on 2026-11-27, the JVM disabled its compiler and then could
# not make a method handle's intrinsic ("Out of space in CodeCache for method handle intrinsic"), which stopped its
# SparkContext. The cache is reserved, not committed: it costs memory only as far as it fills.
TEST_JVM := JAVA_TOOL_OPTIONS="-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC -XX:-UsePerfData $$JAVA_TOOL_OPTIONS"
# Test workers (xdist processes, each with its own Spark session), one per core: the suite is CPU-bound (4 workers on
# this 2-core machine took 26:14 against 21:49 for 2). Each takes whole files, longest first (tests/conftest.py).
TEST_WORKERS ?= 2

test: ## lint, typecheck, then every test (benchmarks and the slow suites excluded)
	@# Python 3.11 with venv and a JDK first, before the preparation side by side: services.sh makes a venv too (the
	@# S3 test server's), and a new JDK means building the local filesystem's jar again
	@test -x $(BIN)/python || bash dev/python.sh $(PY)
	@bash dev/jdk.sh || { test $$? -eq 10 && rm -f $(LOCAL_FS); }
	@# the preparation runs side by side: the services install while pip does, lint while the archive records
	@$(MAKE) --no-print-directory -j3 --output-sync=target test-prep
	@# the project's own modules too (a tenth of a second in each of the hundreds of processes the tests start)
	@$(BIN)/python -m compileall -q spark dags plugins tests dev >/dev/null
	$(TEST_JVM) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not bench and not slow" \
	  --durations=25 $(PYTEST_ARGS)

test-prep: $(STAMP) $(ARCHIVE) lint typecheck services

test-unit: $(STAMP) ## only the pure-Python tests (seconds)
	$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

test-slow: $(STAMP) ## the slow suites
	$(TEST_JVM) $(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

BENCH_ARGS ?= --messages 1000000 --parts floor,cycle,connect,schedule,due,udf --waiting 10000000 --due 100000
bench: $(STAMP) $(ARCHIVE) ## benchmarks behind bench/RESULTS.md (8-30 min at 1M, by the day; BENCH_ARGS="--messages 10000000 ..." for more)
	$(BIN)/python bench/scale.py $(BENCH_ARGS) --results bench/results.jsonl

demo: $(STAMP) $(ARCHIVE) ## run the main job end to end through Airflow on embedded defaults (SQLite, local Spark)
	$(BIN)/python dev/demo.py

demo-cli: $(STAMP) $(ARCHIVE) ## the same cycles through the reprocess CLI only (no Airflow)
	$(BIN)/python -m reprocess.demo

airflow: $(STAMP) $(ARCHIVE) ## start Airflow (its four components) with the project's DAGs and plugin (prints the login)
	$(BIN)/python dev/airflow_local.py $(AIRFLOW_ARGS)

connect-server: $(STAMP) $(ARCHIVE) ## run the long-lived Spark Connect driver on 127.0.0.1:15002 (cycles: --remote sc://localhost:15002)
	$(BIN)/reprocess connect-server $(CONNECT_ARGS)

services: ## check the services the tests need (PostgreSQL, RabbitMQ, ActiveMQ, Chromium, an S3 server); start/install what is missing
	bash dev/services.sh

lint: $(STAMP) ## ruff
	$(BIN)/ruff check spark tests dags plugins bench dev

typecheck: $(STAMP) ## mypy on the core package
	$(BIN)/mypy

lock: ## regenerate requirements/constraints.txt from a fresh install
	rm -rf /tmp/reprocess-lock && $(PY) -m venv /tmp/reprocess-lock
	/tmp/reprocess-lock/bin/pip install -q -e '.[airflow,dev]'
	/tmp/reprocess-lock/bin/pip install -q --force-reinstall --no-deps pyspark==$(PYSPARK_VERSION)
	{ sed -n '1,3p' requirements/constraints.txt; /tmp/reprocess-lock/bin/pip freeze --exclude-editable | grep -v '^-e'; } > requirements/constraints.new
	mv requirements/constraints.new requirements/constraints.txt

clean: ## remove .venv, the S3 test server's venv and caches
	rm -rf $(VENV) .s3server .pytest_cache .mypy_cache .ruff_cache demo-out
