# kesque — two commands on a fresh machine:  make serve   |   make test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test

.PHONY: serve test test-all slow fuzz compat bench examples sim install install-test kcat clean-data help

help:
	@echo "make serve    - create .venv, install, run a single-node broker on 127.0.0.1:9092 (data in ./data)"
	@echo "make test     - install test dependencies and run the default test suite"
	@echo "make slow     - long suites (soak, crash loops)"
	@echo "make fuzz     - the hypothesis suites with fresh random examples, 20x as many (profile fuzz)"
	@echo "make compat   - kafkajs compatibility suite (installs kafkajs from npm)"
	@echo "make bench    - benchmarks: kesque figures and the machine limits they are compared with"
	@echo "make examples - the Spark pipelines in examples/ against a throwaway broker"
	@echo "make sim      - the KRaft quorum simulator: every scenario on SEEDS seeds (default 1000)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	@touch $@

$(TSTAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[test,spark]'
	@touch $@

install: $(STAMP)
install-test: $(TSTAMP)

serve: $(STAMP)
	$(BIN)/kesque serve config/server.properties

kcat:
	@command -v kcat >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq kcat >/dev/null) \
		|| echo "warning: kcat could not be installed; kcat tests will be skipped"

test: $(TSTAMP) kcat
	$(BIN)/python -m pytest -q

test-all: $(TSTAMP) kcat
	$(BIN)/python -m pytest -q -m ""

slow: $(TSTAMP) kcat
	$(BIN)/python -m pytest -q -m slow

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
