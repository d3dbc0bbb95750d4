# Two commands set a fresh machine up: `make demo` and `make test`.
# Each creates .venv and installs the project into it when pyproject.toml is newer.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo example-fix test lint typecheck unit bench bench-short clean chromium bubblewrap bytecode ui-vendor

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,postgres]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/dplan run examples/weather_app.json --embedded

# The debug agent runs a failing test with run_command, reads the failure, fixes the file
# and runs the test again (scripted model, offline), on a fresh copy of the workspace.
EXAMPLE_WS := .example-fix-workspace
example-fix: $(STAMP)
	rm -rf $(EXAMPLE_WS) && cp -r examples/fix-failing-test/workspace $(EXAMPLE_WS)
	DPLAN_WORKSPACE=$(EXAMPLE_WS) DPLAN_AGENTS=examples/fix-failing-test/agents.toml \
		DPLAN_MODEL=scripted/demo $(BIN)/dplan run examples/fix-failing-test/plan.json --embedded

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite runs on PYTEST_WORKERS xdist workers (each with its own Temporal dev server;
# `loadfile` keeps each test file on one worker: the chaos rounds of test_chaos.py run side
# by side in one process, started together by a module fixture).
# Most of an integration test is waiting on Temporal, so more workers than cores pay off.
# mypy runs beside pytest at the lowest priority (nice 19): the tests are the long pole and
# keep the 2 cores busy 95 % of the time, so mypy (27 CPU-s from a fresh clone) is meant to
# run in the other 5 %, not to take a share beside them (at nice 10 it had about a tenth of
# a core while they ran); its output is printed after pytest's, and either failing fails.
# Files are handed out longest first (tests/file_order.py, measured seconds in
# tests/file_durations.json), not xdist's most-tests-first, so no long file is left to run
# alone at the end. The 15 slowest tests (setup, call or teardown) are listed at the end:
# where the next second of the suite's wall time is to be won.
PYTEST_WORKERS ?= 4

test: lint chromium bubblewrap bytecode
	@mypy_log=$$(mktemp); \
	nice -n 19 $(BIN)/mypy > $$mypy_log 2>&1 & mypy_pid=$$!; \
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15; pytest_rc=$$?; \
	wait $$mypy_pid; mypy_rc=$$?; \
	echo "$(BIN)/mypy"; cat $$mypy_log; rm -f $$mypy_log; \
	test $$pytest_rc -eq 0 && test $$mypy_rc -eq 0

# The bytecode cache of the project's own modules, written before the tests run. These
# machines set PYTHONDONTWRITEBYTECODE=1, and an editable install writes no .pyc, so every
# process the suite starts (4 xdist workers, some 300 dplan, dplan-worker and provider
# processes) compiled the package from source again, and so did every replayer and worker
# the tests build (the sandbox imports the workflow modules anew to check them): about a
# tenth of the suite's CPU. Python reads a .pyc whatever that variable says; writing them
# takes under a second (-j 0: both cores), and a rerun only checks them.
BYTECODE_DIRS := durable_plans tests bench workflows activities starter worker.py

bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 $(BYTECODE_DIRS)

# The Temporal Web test (tests/integration/test_codec_browser.py) drives Debian's chromium;
# it skips, saying why, where chromium is missing. As root on Debian/Ubuntu this installs
# it (once: a no-op when present); elsewhere it only says how.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium (apt-get) for the Temporal Web test"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
		echo "chromium could not be installed: the Temporal Web test will skip"; \
	else \
		echo "chromium is missing (apt-get install chromium): the Temporal Web test will skip"; \
	fi

# Commands, checks and sandboxed MCP servers run under bubblewrap (docs/sandbox.md); the
# sandbox tests need it. As root on Debian/Ubuntu this installs it (once: a no-op when
# present); elsewhere it only says how (DPLAN_SANDBOX=auto then refuses each command).
bubblewrap:
	@if command -v bwrap >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing bubblewrap (apt-get) for the command sandbox"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; } || \
		echo "bubblewrap could not be installed: commands will be refused (DPLAN_SANDBOX=auto)"; \
	else \
		echo "bubblewrap is missing (apt-get install bubblewrap): commands will be refused"; \
	fi

# The full run also installs the `bench` extra (the peers of bench.cpu, py-spy);
# bench-short uses what `make install` installed and skips the peers, saying why.
BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,postgres,bench]'
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench

bench-short: $(STAMP)
	$(BIN)/python -m bench --short

# `dplan ui` draws the DAG with @dagrejs/dagre, vendored (nothing is fetched at run or test
# time). This refreshes it from the npm registry: the pinned version's tarball, checked
# against its pinned integrity (npm's sha512), unpacked in a temp dir; the browser build,
# its licence and a VERSION file are copied into durable_plans/ui/static/vendor/.
# Changing the version means changing both pins (`npm view @dagrejs/dagre@X dist.integrity`).
DAGRE_VERSION   := 3.1.3
DAGRE_INTEGRITY := sha512-X4aUTwOReZvthaZWOVHqlJ52/ZdhZFEM4+Lh/uR4XooUSLE6p71bcy7MPGzYnNUcNh+nj+i/qJQpCMIdQnSmrg==
UI_VENDOR       := durable_plans/ui/static/vendor

ui-vendor:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	( cd "$$tmp" && npm pack --silent "@dagrejs/dagre@$(DAGRE_VERSION)" >/dev/null ); \
	tgz="$$tmp/dagrejs-dagre-$(DAGRE_VERSION).tgz"; \
	got="sha512-$$(python3 -c 'import base64,hashlib,sys; print(base64.b64encode(hashlib.sha512(open(sys.argv[1],"rb").read()).digest()).decode())' "$$tgz")"; \
	if [ "$$got" != "$(DAGRE_INTEGRITY)" ]; then echo "integrity mismatch for @dagrejs/dagre@$(DAGRE_VERSION): $$got"; exit 1; fi; \
	tar -xzf "$$tgz" -C "$$tmp"; \
	mkdir -p $(UI_VENDOR); \
	cp "$$tmp/package/dist/dagre.min.js" $(UI_VENDOR)/dagre.min.js; \
	cp "$$tmp/package/LICENSE" $(UI_VENDOR)/dagre.LICENSE.txt; \
	printf '%s\n' "@dagrejs/dagre $(DAGRE_VERSION) (dist/dagre.min.js, bundles @dagrejs/graphlib; MIT)" \
		"from https://registry.npmjs.org/@dagrejs/dagre/-/dagre-$(DAGRE_VERSION).tgz" \
		"integrity $(DAGRE_INTEGRITY)" "refresh: make ui-vendor" > $(UI_VENDOR)/VERSION.txt; \
	echo "vendored @dagrejs/dagre $(DAGRE_VERSION) into $(UI_VENDOR)"

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
