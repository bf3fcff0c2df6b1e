# kesque — two commands on a fresh machine:  make serve   |   make test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test

.PHONY: serve test lint format test-all slow chaos oracle fuzz compat bench examples sim install install-test kcat iptables kafka oracle-kafka clean-data help

# Apache Kafka as the tests' oracle: the release is named once, in oracle/pom.xml
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' oracle/pom.xml)
KAFKA_DIR     := build/kafka
KAFKA_STAMP   := $(KAFKA_DIR)/.resolved-$(KAFKA_VERSION)
MVN           := mvn -q -B -Dstyle.color=never
COPY_DEPS     := org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies
JAVA_CLIENTS  := $(KAFKA_DIR)/java/kesque-oracle-clients.jar
STREAMS_APP   := $(KAFKA_DIR)/streams/kesque-streams-wordcount.jar

help:
	@echo "make serve    - create .venv, install, run a single-node broker on 127.0.0.1:9092 (data in ./data), Prometheus metrics on http://127.0.0.1:9404/metrics"
	@echo "make test     - install test dependencies, lint, and run the default test suite with coverage per package"
	@echo "make lint     - ruff check and ruff format --check (part of make test)"
	@echo "make format   - apply ruff's safe fixes (import order, pyupgrade) and ruff format"
	@echo "make slow     - long suites (soak, crash loops)"
	@echo "make chaos    - replication under SIGKILLed leaders and a partitioned leader, Kafka's transactional copier under bounces (KESQUE_CHAOS_SEED=N)"
	@echo "make fuzz     - the hypothesis suites with fresh random examples, 20x as many (profile fuzz)"
	@echo "make compat   - kafkajs compatibility suite (installs kafkajs from npm)"
	@echo "make bench    - benchmarks: kesque figures and the machine limits they are compared with"
	@echo "make kafka    - resolve Apache Kafka $(KAFKA_VERSION) with Maven into $(KAFKA_DIR)/libs (oracle tests)"
	@echo "make oracle   - every differential test against Kafka, the slow 3-node ones included"
	@echo "make examples - the Spark pipelines in examples/ against a throwaway broker"
	@echo "make sim      - the simulator (KRaft quorum, partition replication): every scenario on SEEDS seeds (default 1000)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml setup.py kesque/records/_cscan.c  # the compiled scan is built by the install
	$(BIN)/pip install -q -e .
	@touch $@

$(TSTAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test,spark]'
	@touch $@

install: $(STAMP)
install-test: $(TSTAMP)

serve: $(STAMP)
	$(BIN)/kesque serve config/server.properties --override metrics.listener=http://127.0.0.1:9404

kcat:
	@command -v kcat >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq kcat >/dev/null) \
		|| echo "warning: kcat could not be installed; kcat tests will be skipped"

# resolved once, kept until a pom changes: a warm build/kafka needs neither Maven nor the
# network. Online first, then offline from ~/.m2 (Maven Central briefly unreachable).
$(KAFKA_STAMP): oracle/pom.xml oracle/kafka/pom.xml
	rm -rf $(KAFKA_DIR)/libs.tmp
	$(MVN) -f oracle/kafka/pom.xml $(COPY_DEPS) -DoutputDirectory=$(CURDIR)/$(KAFKA_DIR)/libs.tmp \
		|| $(MVN) -o -f oracle/kafka/pom.xml $(COPY_DEPS) -DoutputDirectory=$(CURDIR)/$(KAFKA_DIR)/libs.tmp
	rm -rf $(KAFKA_DIR)/libs $(KAFKA_DIR)/.resolved-*
	mv $(KAFKA_DIR)/libs.tmp $(KAFKA_DIR)/libs
	@touch $@

# the Java client driver (kafka-clients) of tests/test_oracle_java_clients.py
$(JAVA_CLIENTS): oracle/pom.xml oracle/java/pom.xml $(shell find oracle/java/src -name '*.java')
	$(MVN) -f oracle/java/pom.xml package || $(MVN) -o -f oracle/java/pom.xml package
	@touch $@

# the Kafka Streams word count of tests/test_streams_eos.py and bench/streams.py (kafka-streams and
# rocksdbjni beside it in $(KAFKA_DIR)/streams/libs)
$(STREAMS_APP): oracle/pom.xml oracle/streams/pom.xml $(shell find oracle/streams/src -name '*.java')
	$(MVN) -f oracle/streams/pom.xml package || $(MVN) -o -f oracle/streams/pom.xml package
	@touch $@

kafka: $(KAFKA_STAMP) $(JAVA_CLIENTS) $(STREAMS_APP)

# make test: Kafka too when a JDK and Maven are here; otherwise the oracle tests skip (one line why)
oracle-kafka:
	@if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory -s kafka || echo "warning: Kafka could not be resolved; oracle tests will be skipped"; \
	else echo "note: no java/mvn on PATH; the Kafka oracle tests will be skipped"; fi

# rules and settings in pyproject.toml ([tool.ruff])
lint: $(TSTAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# the safe fixes first (import order, pyupgrade), then the formatter
format: $(TSTAMP)
	$(BIN)/ruff check --fix-only .
	$(BIN)/ruff format .

# two workers, each taking whole files (module fixtures stay shared): 12 minutes instead of 22
# on two cores; TEST_WORKERS=0 runs in one process. Under coverage (COVERAGE=0: without), the
# brokers and tools the tests start included ([tool.coverage.*] in pyproject.toml); the data
# files are combined and reported per package at the end, and a total under the floor fails.
TEST_WORKERS ?= 2
COVERAGE ?= 1
PYTEST_ARGS = -q $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
test: lint kcat oracle-kafka
ifeq ($(COVERAGE),0)
	$(BIN)/python -m pytest $(PYTEST_ARGS)
else
	$(BIN)/coverage erase
	$(BIN)/coverage run -m pytest $(PYTEST_ARGS)
	$(BIN)/python tests/tools/coverage_by_package.py
endif

test-all: $(TSTAMP) kcat oracle-kafka
	$(BIN)/python -m pytest -q -m ""

slow: $(TSTAMP) kcat
	$(BIN)/python -m pytest -q -m slow

# issue 14's test 5: acks=all, transactions and a group while partition leaders are killed
# issue 25: a leader cut off from the other nodes by iptables (test_network_partition.py), and Kafka's
# transactional copier (its system test transactions_test.py) under bounces (test_txn_copier_chaos.py)
chaos: $(TSTAMP) iptables oracle-kafka
	$(BIN)/python -m pytest -q -m slow tests/test_replication_chaos.py tests/test_network_partition.py \
		tests/test_txn_copier_chaos.py

iptables:
	@command -v iptables >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq iptables >/dev/null) \
		|| echo "warning: iptables could not be installed; the network partition test will be skipped"

# every differential test against Apache Kafka, the slow 3-node ones included
oracle: $(TSTAMP) kcat oracle-kafka
	$(BIN)/python -m pytest -q -m oracle

# the hypothesis suites (pytest's "hypothesis" marker) with the fuzz profile (tests/conftest.py):
# not derandomized, 20x the examples, no per-test time limit
fuzz: $(TSTAMP)
	$(BIN)/python -m pytest -q -m hypothesis --hypothesis-profile=fuzz --timeout=0

compat: $(TSTAMP)
	cd tests/compat && npm install --no-audit --no-fund --silent
	$(BIN)/python -m pytest -q -m compat

examples: $(TSTAMP)
	$(BIN)/python examples/run_all.py

bench: $(TSTAMP)
	$(BIN)/python bench/run.py

SEEDS ?= 1000
sim: $(STAMP)
	$(BIN)/python -m kesque.sim --seeds $(SEEDS)

clean-data:
	rm -rf data
