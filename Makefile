# kesque — two commands on a fresh machine:  make serve   |   make test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test

.PHONY: serve test lint format test-all slow chaos oracle fuzz compat security mirror browser chromium bench examples sim sweep install install-test kcat iptables kafka oracle-kafka spark spark-kafka mm2 clean-data help

# Apache Kafka as the tests' oracle: the release is named once, in oracle/pom.xml
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' oracle/pom.xml)
KAFKA_DIR     := build/kafka
KAFKA_STAMP   := $(KAFKA_DIR)/.resolved-$(KAFKA_VERSION)
MVN           := mvn -q -B -Dstyle.color=never
COPY_DEPS     := org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies
JAVA_CLIENTS  := $(KAFKA_DIR)/java/kesque-oracle-clients.jar
STREAMS_APP   := $(KAFKA_DIR)/streams/kesque-streams-wordcount.jar
# Spark's own Kafka connector (format "kafka") and the jars it adds to pyspark's: bench/spark.py and
# tests/test_spark_differential.py (make spark) compare format "kesque" with it
SPARK_KAFKA_DIR   := build/spark-kafka
SPARK_KAFKA_STAMP := $(SPARK_KAFKA_DIR)/.resolved
SPARK_KAFKA_JARS  := spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2

help:
	@echo "make serve    - create .venv, install, run a single-node broker on 127.0.0.1:9092 (data in ./data), Prometheus metrics on http://127.0.0.1:9404/metrics, the web console on http://127.0.0.1:8080/"
	@echo "make test     - install test dependencies, lint, and run the default test suite with coverage per package"
	@echo "make lint     - ruff check and ruff format --check (part of make test)"
	@echo "make format   - apply ruff's safe fixes (import order, pyupgrade) and ruff format"
	@echo "make slow     - long suites (soak, crash loops)"
	@echo "make chaos    - replication under SIGKILLed leaders and a partitioned leader, Kafka's transactional copier under bounces (KESQUE_CHAOS_SEED=N)"
	@echo "make fuzz     - the hypothesis suites with fresh random examples, 20x as many (profile fuzz)"
	@echo "make compat   - kafkajs compatibility suite (installs kafkajs from npm)"
	@echo "make security - the security client matrix: 4 client stacks x SSL, mTLS, SASL_PLAINTEXT, SASL_SSL x 4 mechanisms, on a broker and a 3-node cluster"
	@echo "make mirror   - mirror topics: a Kafka 4.4 source, kesque sources and destinations through kills and leader changes"
	@echo "make mm2      - Apache Kafka's MirrorMaker 2 (4.3.1) into build/mm2, for bench/mirror.py's comparison"
	@echo "make browser  - the web console in Debian's headless Chromium (installs chromium and chromium-driver with apt); screenshots in build/artifacts/console/"
	@echo "make bench    - benchmarks: kesque figures and the machine limits they are compared with"
	@echo "make kafka    - resolve Apache Kafka $(KAFKA_VERSION) with Maven into $(KAFKA_DIR)/libs (oracle tests)"
	@echo "make oracle   - every differential test against Kafka, the slow 3-node ones included"
	@echo "make examples - the Spark pipelines in examples/ against a throwaway broker"
	@echo "make spark    - format kesque against Spark's own Kafka connector (resolved with Maven into $(SPARK_KAFKA_DIR))"
	@echo "make sweep    - the real broker's simulator sweeps on all 100 seeds each (make test runs the first 10; KESQUE_SIM_SWEEP=N for N)"
	@echo "make sim      - the simulator (KRaft quorum, partition replication, the real broker): every scenario on SEEDS seeds"
	@echo "                (default 1000), or SCENARIOS='real_*' only, in JOBS processes: make sim SEEDS=2000 SCENARIOS='real_*' JOBS=2"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml setup.py kesque/records/_cscan.c kesque/metrics/_cfold.c  # the compiled parts are built by the install
	$(BIN)/pip install -q -e .
	@touch $@

$(TSTAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test,spark]'
	@touch $@

install: $(STAMP)
install-test: $(TSTAMP)

serve: $(STAMP)
	$(BIN)/kesque serve config/server.properties --override metrics.listener=http://127.0.0.1:9404 \
		--override console.listener=http://127.0.0.1:8080

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

$(SPARK_KAFKA_STAMP): oracle/pom.xml oracle/spark/pom.xml
	rm -rf $(SPARK_KAFKA_DIR)
	$(MVN) -f oracle/spark/pom.xml $(COPY_DEPS) -DincludeArtifactIds=$(SPARK_KAFKA_JARS) \
		-DoutputDirectory=$(CURDIR)/$(SPARK_KAFKA_DIR) \
		|| $(MVN) -o -f oracle/spark/pom.xml $(COPY_DEPS) -DincludeArtifactIds=$(SPARK_KAFKA_JARS) \
		-DoutputDirectory=$(CURDIR)/$(SPARK_KAFKA_DIR)
	@touch $@

spark-kafka: $(SPARK_KAFKA_STAMP)

# Apache Kafka's MirrorMaker 2 (4.3.1, its own classpath) for bench/mirror.py's comparison
MM2_DIR   := build/mm2
MM2_STAMP := $(MM2_DIR)/.resolved
$(MM2_STAMP): oracle/mm2/pom.xml
	rm -rf $(MM2_DIR)
	$(MVN) -f oracle/mm2/pom.xml $(COPY_DEPS) -DoutputDirectory=$(CURDIR)/$(MM2_DIR) \
		|| $(MVN) -o -f oracle/mm2/pom.xml $(COPY_DEPS) -DoutputDirectory=$(CURDIR)/$(MM2_DIR)
	@touch $@

mm2: $(MM2_STAMP)

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

# four workers on two cores, each taking whole files (module fixtures stay shared): the tests
# spend much of their time waiting (brokers and JVMs starting, clients polling): two workers kept
# 1.4 cores busy (19:12 for the suite in a clean clone), three about 1.6 (KESQUE_TEST_CPU=FILE
# counts each test's CPU: 1,530-1,560 s of it in a suite, where 15:57 of three workers offered
# 1,914); the real broker's five simulator sweeps run seeds 0-9 here and all 100 in make sweep
# (why twenty: tests/test_sim_real_sweep.py): 59 of the 345 s of CPU that all 100 took in one run
# (the sweeps were 228 s of a suite's 1,533 counted earlier: about 190 s less); the longest files go
# first (tests/conftest.py HEAVY_FIRST, so no worker is left alone with a long file at the end);
# TEST_WORKERS=3 as before, TEST_WORKERS=0 runs in one process. Under coverage (COVERAGE=0: without), the
# brokers and tools the tests start included ([tool.coverage.*] in pyproject.toml); the data
# files are combined and reported per package at the end, and a total under the floor fails.
TEST_WORKERS ?= 4
COVERAGE ?= 1
PYTEST_ARGS = -q --durations=30 $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
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

# issue 27's client matrix in full (tests/test_security_matrix.py): the default suite runs its
# slice, this the rest too; Kafka's Java client is part of it when `make kafka` has run
security: $(TSTAMP) oracle-kafka
	$(BIN)/python -m pytest -q -m "" tests/test_security_matrix.py

# issue 28's mirror topics with a Kafka 4.4 source and through faults (tests/test_mirror_faults.py),
# consumer offsets copied into a 3-node destination (tests/test_mirror_offsets.py), a
# transactional pipeline failing over exactly once at 20 cut points (tests/test_mirror_eos.py), a
# Kafka 4.4 source over SASL_SSL with SCRAM (tests/test_mirror_security.py), configs synced
# through a separate controller (tests/test_mirror_configs.py), and the simulator's mirror
# scenario on 100 short and 20 full seeds (tests/test_sim_real_mirror.py); Apache Kafka's MirrorMaker 2
# copying exactly once between kesque brokers (tests/test_mirror_mm2.py, with make mm2 done)
mirror: $(TSTAMP) oracle-kafka
	$(BIN)/python -m pytest -q -m mirror tests/test_mirror_faults.py tests/test_mirror_offsets.py tests/test_mirror_eos.py \
		tests/test_mirror_security.py tests/test_mirror_configs.py tests/test_sim_real_mirror.py tests/test_mirror_mm2.py

# issue 29's test 2 (tests/test_console_browser.py): Debian's Chromium and its chromedriver from apt,
# Selenium from the "browser" extra; nothing is downloaded at run time (SE_OFFLINE)
browser: $(TSTAMP) chromium
	$(BIN)/pip install -q -e '.[test,spark,browser]'
	SE_OFFLINE=true $(BIN)/python -m pytest -q -m browser tests/test_console_browser.py

chromium:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || (apt-get update -qq \
		&& apt-get install -y -qq chromium chromium-driver >/dev/null) \
		|| echo "warning: chromium could not be installed; the browser test will be skipped"

# issue 30: the differential test of format kesque against format kafka, batch and streaming
spark: $(TSTAMP) spark-kafka
	$(BIN)/python -m pytest -q -m spark_kafka tests/test_spark_differential.py

examples: $(TSTAMP)
	$(BIN)/python examples/run_all.py

bench: $(TSTAMP)
	$(BIN)/python bench/run.py

# the real broker's five simulator sweeps (tests/test_sim_real_sweep*.py) on all their seeds: make test
# runs seeds 0-9 of each, the sim_sweep tests 10-99 (issue 26's 100; KESQUE_SIM_SWEEP=N: seeds 0..N-1),
# about 4 minutes of CPU; the bug-switch tests of the same files come along
sweep: $(TSTAMP)
	$(BIN)/python -m pytest -q -m "" tests/test_sim_real_sweep.py tests/test_sim_real_sweep_quorum.py

# SCENARIOS: names or patterns (default: every scenario); JOBS: seeds run at once, in processes
SEEDS ?= 1000
SCENARIOS ?=
JOBS ?= 1
sim: $(STAMP)
	$(BIN)/python -m kesque.sim --seeds $(SEEDS) --jobs $(JOBS) $(foreach s,$(SCENARIOS),--scenario '$(s)')

clean-data:
	rm -rf data
