# `make demo` and `make test` are the two commands a new user needs (README.md).
# Both bootstrap .venv on first use and re-install when pyproject.toml changes.
# Before that, scripts/system-deps checks what pip cannot install (Java; Prometheus
# and PostgreSQL for the tests; Maven for Apache Kafka) in milliseconds: it installs
# what is missing with apt-get when run as root (or with passwordless sudo), else
# stops at once naming the command that does.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pytest; when it dies on a signal (a crash in native code), the Python stack of the
# thread that crashed is printed last (scripts/pytest-or-crash, tests/crash_report.py).
PYTEST := scripts/pytest-or-crash $(BIN)/python -m pytest
# make test runs its test files on this many pytest-xdist workers, a file at a time
# (--dist loadfile: a module's fixtures stay in one process). Most of a test's time is
# a Spark driver starting or a broker answering, so on 2 cores two workers take about
# 11 minutes where one took 17. TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2

.PHONY: jar test-jvm demo test test-unit test-integration test-apache-kafka test-soak \
	system-deps-demo system-deps-test system-deps-test-integration \
	system-deps-test-apache-kafka system-deps-test-soak lint typecheck docs bench bench-peers bench-spark-kafka soak soak-long clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The benchmarks' extra (matplotlib for the soak's plot, polars for bench_limit.py's
# codec-matched consumer), on top of the test extra.
$(VENV)/.bench: pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

# The documentation site's extra (MkDocs, Material, mkdocstrings).
$(VENV)/.docs: pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'
	touch $@

# The floodgate_kafka source's jar (jvm/, Java 17 and Maven), copied into the package
# where build_spark_session finds it; rebuilt when a file under jvm/ changes. An
# installed wheel carries it (setup.py builds it in the wheel's build step).
JAR := pipeline/spark/jars/floodgate-spark.jar
JVM_SOURCES := jvm/pom.xml $(shell find jvm/src -type f 2>/dev/null)

$(JAR): $(JVM_SOURCES)
	scripts/build-jar --skip-tests

jar: $(JAR)

# The JUnit tests of the jar (`make test` runs them first).
test-jvm:
	cd jvm && mvn -B -q --no-transfer-progress -Dstyle.color=never \
		-Dmaven.repo.local=$${FLOODGATE_MAVEN_REPO:-$$HOME/.cache/floodgate/m2} test

# First prerequisite of each target that needs them, so a missing tool stops the run
# before the virtualenv is built, not after minutes of failing tests. test-unit needs none.
system-deps-demo system-deps-test system-deps-test-integration system-deps-test-apache-kafka system-deps-test-soak system-deps-test-compose:
	@scripts/system-deps $(@:system-deps-%=%)

# On the embedded broker, as test does: a Docker engine that answers (as test-compose
# starts one) would otherwise be tried first (FLOODGATE_KAFKA_ENGINE picks another).
demo: system-deps-demo $(STAMP) $(JAR)
	FLOODGATE_KAFKA_ENGINE=$${FLOODGATE_KAFKA_ENGINE:-noida-db} $(BIN)/floodgate demo $(ARGS)

# On the embedded broker whatever else the machine has: a Docker engine (as
# test-compose starts one) would otherwise be tried first, through testcontainers.
test: system-deps-test $(STAMP) $(JAR) test-jvm
	FLOODGATE_KAFKA_ENGINE=$${FLOODGATE_KAFKA_ENGINE:-noida-db} $(PYTEST) \
		-n $(TEST_WORKERS) --dist loadfile $(ARGS)

test-unit: $(STAMP)
	$(PYTEST) tests/unit $(ARGS)

test-integration: system-deps-test-integration $(STAMP) $(JAR)
	FLOODGATE_KAFKA_ENGINE=$${FLOODGATE_KAFKA_ENGINE:-noida-db} $(PYTEST) tests/integration $(ARGS)

# The integration tests (soak included) on Apache Kafka's own broker instead of the
# embedded one: needs Maven on first use, to fetch the broker's jars (docs/kafka-engines.md).
# With them, the tests of Floodgate as users deploy it (marker `deployment`): the built
# wheel in a fresh virtualenv, and a Spark standalone cluster (docs/spark-cluster.md).
test-apache-kafka: system-deps-test-apache-kafka $(STAMP) $(JAR)
	FLOODGATE_KAFKA_ENGINE=apache-kafka $(PYTEST) tests/integration $(ARGS)

# The soak's short mode alone, on Apache Kafka (CI's second pass runs it; a few
# minutes). On the embedded broker: FLOODGATE_KAFKA_ENGINE=noida-db make soak ARGS=--short.
test-soak: system-deps-test-soak $(STAMP) $(JAR)
	FLOODGATE_KAFKA_ENGINE=apache-kafka $(PYTEST) tests/integration/soak/test_soak.py -m soak $(ARGS)

# The docker-compose stack, for real: Docker's engine started if none runs (and stopped
# after), the images built from Debian, Maven Central and PyPI (scripts/compose-images),
# the stack up on them (docker-compose.ci.yml), checked, and taken down.
test-compose: system-deps-test-compose $(STAMP) $(JAR)
	scripts/with-dockerd env FLOODGATE_TEST_COMPOSE=1 sh -c 'scripts/compose-images && \
		FLOODGATE_KAFKA_ENGINE=apache-kafka $(PYTEST) tests/integration/deployment/test_compose_stack.py -m compose $(ARGS)'

lint: $(STAMP)
	$(BIN)/ruff check pipeline admission sweeper tests bench
	$(BIN)/ruff format --check pipeline admission sweeper tests bench
	$(BIN)/lint-imports
	$(BIN)/python scripts/check-contracts
	$(BIN)/python scripts/check-sizes
	cd jvm && mvn -B -q --no-transfer-progress -Dstyle.color=never \
		-Dmaven.repo.local=$${FLOODGATE_MAVEN_REPO:-$$HOME/.cache/floodgate/m2} spotless:check

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site, built into site/ (git-ignored); fails on any warning, such
# as a broken link or a docstring mkdocstrings cannot resolve.
docs: $(VENV)/.docs
	$(BIN)/mkdocs build --strict

bench: $(STAMP) $(JAR)
	$(BIN)/python bench/bench_source.py $(ARGS)
	$(BIN)/python bench/bench_put.py $(ARGS)
	$(BIN)/python bench/bench_output.py $(ARGS)
	$(BIN)/python bench/bench_admission.py

# Against Quix Streams, the raw limit, latency, memory (about 35 minutes;
# bench/README.md). The Quix side makes its own virtualenv, bench/.venv-quix.
bench-peers: $(VENV)/.bench
	$(BIN)/python bench/bench_flights.py $(ARGS)
	$(BIN)/python bench/bench_limit.py $(ARGS)
	$(BIN)/python bench/bench_latency.py $(ARGS)
	$(BIN)/python bench/bench_memory.py $(ARGS)

# Against Spark's own Kafka connector and from_avro (bench/README.md; about
# 15 minutes with the default 5 repeats). The peer makes its own virtualenv,
# bench/.venv-spark-kafka (pyspark 4.2.0), and fetches the connector's jars with Maven
# into ~/.cache/floodgate/spark-kafka-4.2.0 on first use. ARGS="--workload passthrough
# [--batch N]": a query with a tuple out per flight instead of the flights group's
# aggregations (bench/out/spark_kafka_passthrough.json).
bench-spark-kafka: $(STAMP) $(JAR)
	$(BIN)/python bench/bench_spark_kafka.py $(ARGS)

# The fault-injection soak, long mode (bench/README.md); ARGS="--short" for the test's.
soak: $(VENV)/.bench $(JAR)
	$(BIN)/python bench/soak.py $(ARGS)

# The soak at scale, on Apache Kafka: ten rounds of the flights (3.4 M tuples) under every
# fault; tuples/s and peak memory per round, and a plot of memory, file descriptors and
# threads over time (bench/out/soak-<time>/soak.png; bench/README.md, "The soak at scale").
soak-long: system-deps-test-soak $(VENV)/.bench $(JAR)
	FLOODGATE_KAFKA_ENGINE=apache-kafka $(BIN)/python bench/soak.py --rounds 10 --duration 14400 $(ARGS)

clean:
	rm -rf .floodgate .pytest_cache .mypy_cache .ruff_cache
