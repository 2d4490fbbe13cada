# lmprep: `make` runs the whole pipeline on data/raw/, `make test` runs the test suite (its fast tier) and
# `make test-slow` its slow tier (CI runs both: .ci/run).
# Both create .venv and install the pinned dependencies first when missing or when
# pyproject.toml changed, building the native tokenizer core (C++; optional: without a compiler
# lmprep runs on its pure-Python path). Pick another config with CONFIG=configs/x.yaml make ...

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
CONFIG ?= configs/default.yaml
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
TEST_INSTALLED := $(VENV)/.installed-test
PIP := $(BIN)/python -m pip --disable-pip-version-check --quiet
LMPREP := $(BIN)/lmprep

.DEFAULT_GOAL := all
.PHONY: all prepare tokenize train status test test-slow constraints sanitize clean help report browser

all: $(INSTALLED) ## Run every stale stage in one lmprep process (prepare, tokenizer, encode, train, export, stats)
	$(LMPREP) run --config $(CONFIG)

prepare: $(INSTALLED) ## Read, clean, de-duplicate and split data/raw/
	$(LMPREP) run prepare --config $(CONFIG)

tokenize: $(INSTALLED) ## Train (or reuse) the tokenizer, then encode the corpus into Arrow shards
	$(LMPREP) run tokenizer encode --config $(CONFIG)

train: $(INSTALLED) ## Train the tiny model on the shards and save a checkpoint
	$(LMPREP) run train --config $(CONFIG)

status: $(INSTALLED) ## Show which stages are up to date and why the others are not
	$(LMPREP) status --config $(CONFIG)

# The suite runs on every core (pytest-xdist), each test file on one worker (its module fixtures built once),
# with one worker more than cores: many tests wait for a subprocess or a timeout, and the extra worker fills
# those waits (on 2 cores the fast tier took 4.5 minutes with 3 workers, 5.9 with 2). TEST_WORKERS=N to choose.
# Tests marked `slow` (end to end through make, the benchmarks' smoke runs) are the second tier.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

test: $(TEST_INSTALLED) browser ## Run the linter and the fast tier of the test suite (every test not marked slow)
	$(BIN)/ruff check .
	$(PYTEST) -m "not slow"

test-slow: $(TEST_INSTALLED) ## Run the slow tier: the tests marked slow (CI runs it after `make test`)
	$(PYTEST) -m slow

constraints: $(TEST_INSTALLED) ## Rewrite constraints.txt from the test environment (after changing a pin)
	{ grep '^#' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

report: $(INSTALLED) ## Write report.html, one page of the run's outputs (runs no stage)
	$(LMPREP) report --config $(CONFIG)

# The report's test opens the page in Debian's chromium, installed here when missing (apt-get, as root).
browser:
	@command -v chromium >/dev/null || apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }

sanitize: $(TEST_INSTALLED) ## Build the native core with ASan+UBSan and run the native tests against it
	rm -rf $(SANITIZE) && mkdir -p $(SANITIZE)/src
	git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C $(SANITIZE)/src
	cd $(SANITIZE)/src && CFLAGS="$(SANITIZE_FLAGS)" CXXFLAGS="$(SANITIZE_FLAGS)" LDFLAGS="$(SANITIZE_FLAGS)" \
	  $(CURDIR)/$(BIN)/python setup.py -q build_ext --inplace
	nm -D $(SANITIZE)/src/pipeline/tokenizer/_native.*.so | grep -q __asan_report \
	  || { echo "sanitize: the core was built without the sanitizers" >&2; exit 1; }
	cd $(SANITIZE)/src && LD_PRELOAD="$(SANITIZE_RUNTIMES)" PYTHONMALLOC=malloc PYTHONPATH=. \
	  ASAN_OPTIONS=detect_leaks=0:log_path=$(CURDIR)/$(SANITIZE)/asan \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(CURDIR)/$(SANITIZE)/ubsan \
	  $(CURDIR)/$(BIN)/python -m pytest -q -p no:cacheprovider $(NATIVE_TESTS)
	@! ls $(SANITIZE)/*san.* 2>/dev/null || { cat $(SANITIZE)/*san.*; exit 1; }
	@echo "sanitize: the native tests passed with no sanitizer report"

clean: $(INSTALLED) ## Delete derived data (never data/raw/ or checkpoints/)
	$(LMPREP) clean --config $(CONFIG)

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 12

# Two `make` at once must not create or pip-install into one venv together: each install step runs
# under flock (util-linux; unlocked where flock is missing) on pyproject.toml, and skips the work
# when, by the time it holds the lock, another make has done it.
LOCKED := $(if $(shell command -v flock),flock pyproject.toml) bash -c

# The native tokenizer core is built by the install (setup.py): its sources are prerequisites, so a change
# to them rebuilds it.
NATIVE_SOURCES := setup.py $(wildcard pipeline/tokenizer/_native*.cpp pipeline/tokenizer/_native*.h pipeline/tokenizer/_unicode_tables.h)

$(INSTALLED): pyproject.toml $(NATIVE_SOURCES)
	$(LOCKED) 'for p in $^; do test $@ -nt $$p || stale=1; done; test -z "$$stale" || \
	  { { test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); } && $(PIP) install -e . && touch $@; }'

# `make sanitize` builds the core in a copy of the working tree (build/sanitize/src), so the checkout's own
# build stays as it is; setuptools compiles C++ with CXXFLAGS (which replace its own flags, hence -O1 -g),
# and the target checks that the module is instrumented. The interpreter is not sanitized, so the runtimes
# are preloaded. A report goes to a log file (pytest captures stderr), and any report fails the target.
SANITIZE := build/sanitize
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g
SANITIZE_RUNTIMES = $(shell $(CXX) -print-file-name=libasan.so) $(shell $(CXX) -print-file-name=libubsan.so)
NATIVE_TESTS := $(wildcard tests/tokenizer/test_native_*.py) tests/tokenizer/test_tokenizer_tiktoken.py

# The test dependencies in one resolver pass: constraints.txt gives each package one version.
$(TEST_INSTALLED): $(INSTALLED) constraints.txt
	$(LOCKED) 'for p in $^; do test $@ -nt $$p || stale=1; done; test -z "$$stale" || \
	  { $(PIP) install -c constraints.txt -e ".[test]" && touch $@; }'
