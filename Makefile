# tinyq: `make` builds dist/tinyq.so; `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
PY ?= /usr/bin/python3
CARGO ?= cargo
EXT := dist/tinyq.so

.PHONY: all loadable rust build-deps deps release demo test test-all test-rust test-python test-python-current \
	test-python-current-all test-packaging test-node test-node-drivers test-drivers test-cluster soak bench bench-quick screenshots clean \
	install uninstall wheel npm-pack test-npm-package

all: loadable

# Building dist/tinyq.so needs Rust, a C compiler and libclang (sqlite3ext-sys runs bindgen):
# nothing else, and no root. On Debian, as root, build-deps installs libclang-dev if it is
# missing; anywhere else it only says so, and cargo reports what it lacks itself.
build-deps:
	@if command -v dpkg >/dev/null 2>&1 && ! dpkg -s libclang-dev >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing: libclang-dev"; \
	    (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev >/dev/null; \
	  else echo "note: libclang-dev is not installed (bindgen needs libclang); as root: apt-get install libclang-dev"; fi; \
	fi

# Everything the tests need that a fresh Debian machine lacks (apt, as root).
deps: build-deps
	@missing=""; \
	command -v sqlite3 >/dev/null 2>&1 || missing="$$missing sqlite3"; \
	$(PY) -c 'import pytest' >/dev/null 2>&1 || missing="$$missing python3-pytest"; \
	$(PY) -c 'import hypothesis' >/dev/null 2>&1 || missing="$$missing python3-hypothesis"; \
	$(PY) -c 'import xdist' >/dev/null 2>&1 || missing="$$missing python3-pytest-xdist"; \
	$(PY) -c 'import apsw' >/dev/null 2>&1 || missing="$$missing python3-apsw"; \
	$(PY) -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
	command -v valgrind >/dev/null 2>&1 || missing="$$missing valgrind"; \
	command -v node >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium chromium-driver"; \
	$(PY) -c 'import prometheus_client' >/dev/null 2>&1 || missing="$$missing python3-prometheus-client"; \
	$(PY) -c 'import sqlalchemy' >/dev/null 2>&1 || missing="$$missing python3-sqlalchemy"; \
	$(PY) -c 'import aiosqlite' >/dev/null 2>&1 || missing="$$missing python3-aiosqlite"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

loadable: $(EXT)

# build-deps is order-only: it runs first, but does not make the library out of date.
# Rust comes from rustup (Debian's rustc is too old): say so before cargo's own error.
RUST_MIN := $(shell sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
rust:
	@command -v $(CARGO) >/dev/null 2>&1 || { \
	  echo "tinyq needs Rust $(RUST_MIN) or newer, and cargo is not on PATH."; \
	  echo "Install it with rustup, the Rust project's installer, then open a new shell (or: . ~/.cargo/env)."; \
	  exit 1; }
	@have=$$(rustc --version 2>/dev/null | cut -d' ' -f2); \
	if [ "$$(printf '%s\n%s\n' "$(RUST_MIN)" "$$have" | sort -V | head -1)" != "$(RUST_MIN)" ]; then \
	  echo "tinyq needs Rust $(RUST_MIN) or newer; this rustc is $$have. Update it: rustup update stable"; exit 1; fi

$(EXT): $(shell find src sql -type f 2>/dev/null) Cargo.toml build.rs | rust build-deps
	$(CARGO) build --release --lib
	@mkdir -p dist
	@# copy then rename: a process that has the old file loaded keeps a valid mapping
	cp target/release/libtinyq.so $(EXT).tmp && mv -f $(EXT).tmp $(EXT)

# Format, lints (Cargo.toml [lints]: pedantic, each exemption justified) and the checks of
# the repository itself: query plans pinned, docs self-contained. Under a minute after `make`.
# Both builds are linted: the loadable one and the one linked into a Rust program (rusqlite).
.PHONY: check fuzz
check: deps $(EXT)
	$(CARGO) fmt --check
	$(CARGO) fmt --check --manifest-path examples/rust/Cargo.toml
	$(CARGO) clippy --release --all-targets -- -D warnings
	$(CARGO) clippy --release --lib --no-default-features --features rusqlite -- -D warnings
	$(PY) scripts/circles.py
	$(PY) -m pytest -q tests/test_query_plans.py tests/test_docs.py tests/test_circles.py

# The long fuzz run (tests/test_fuzz.py): every function, random arguments and interleavings,
# the store's invariants after each step, failures shrunk. FUZZ_SECONDS (default 600) and
# FUZZ_EXAMPLES (programs per hypothesis run, default 200) make it longer or shorter.
FUZZ_SECONDS ?= 600
FUZZ_EXAMPLES ?= 200
fuzz: deps $(EXT)
	TINYQ_FUZZ_LONG=1 TINYQ_FUZZ_SECONDS=$(FUZZ_SECONDS) TINYQ_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
	  $(PY) -m pytest -q -s tests/test_fuzz.py

# The demo needs only the build and Python: no test tools.
demo: $(EXT)
	$(PY) examples/demo.py

# `make test`: what a contributor runs after a change, about 15 minutes on 2 cores. Every rule
# is covered: the Rust unit tests, the whole Python suite on Debian's SQLite (files spread over
# three pytest processes, each file whole in one), the files whose behaviour depends on the
# SQLite version again on a current one, and the Node helper's tests. The longest tests run
# in their quick form (TINYQ_FULL unset): a 20 s soak, 10 s of fuzzing, 300 connections in the
# memory footprint, stores of 20,000 and 100,000
# jobs where test-all builds 1,000,000.
# `make test-all`: everything make test leaves out, with the long forms (TINYQ_FULL=1): the
# long tests, the whole suite again on a current SQLite, the Node helper on node:sqlite and
# bun:sqlite, every SQL driver, the dqlite cluster. .ci/run runs check, test and test-all.
PYTEST_JOBS ?= 3
PYTEST_PAR = $(if $(filter 1,$(PYTEST_JOBS)),,-n $(PYTEST_JOBS) --dist loadfile)
test: deps $(EXT) test-rust test-python test-python-current test-node

test-all: test-python-long test-packaging test-python-current-all test-node-drivers test-drivers test-cluster

test-rust: deps
	$(CARGO) test --release --lib

# (node/node_modules: the soak, tests/test_soak.py, runs Node producers and workers too)
PACKAGING = test_rust_crate test_install test_release test_platforms test_wasi test_pysqlite3 test_django test_otel
test-python: deps $(EXT) node/node_modules
	TINYQ_SOAK_SECONDS=$${TINYQ_SOAK_SECONDS:-20} $(PY) -m pytest -q $(PYTEST_PAR) --durations=15 tests \
	  $(foreach t,$(PACKAGING),--ignore=tests/$(t).py)

# The release smoke (test-all): the crate linked into a Rust program, pip and make install,
# dist/release/ when make release has filled it, and what pip fetches from PyPI: the pysqlite3
# extra under a pyenv Python, Django 5.2 and 6 (tinyq.django), OpenTelemetry's SDK.
test-packaging: deps $(EXT) node/node_modules
	$(PY) -m pytest -q $(PYTEST_PAR) $(foreach t,$(PACKAGING),tests/$(t).py)

# The long forms alone (TINYQ_FULL=1): the minute-long soak, the fuzz's full budget, the
# stores of 1,000,000 jobs, 1,000 connections in the memory footprint.
LONG_TESTS = test_soak test_fuzz test_cost test_pages test_memory
test-python-long: deps $(EXT) node/node_modules
	TINYQ_FULL=1 $(PY) -m pytest -q $(PYTEST_PAR) $(foreach t,$(LONG_TESTS),tests/$(t).py)

# The files whose behaviour depends on the SQLite version, on a current SQLite (3.52, built
# once in ~1 min by scripts/sqlite_current.sh and cached in target/sqlite-current/, put in
# front of Debian's 3.40 via LD_LIBRARY_PATH and PATH): query plans and VM-step costs,
# what the schema may call (SEC-01), loading and the version check, the file and lock
# handling (WAL, checkpoints, faults, power cuts), JSON as stored, migrations and the
# store's check, errors worded by SQLite, the sqlite3 shell, and how waits obey the host.
VERSION_DEPENDENT = test_query_plans test_cost test_security test_hostile_schema test_load_check \
  test_wal test_wait_lock test_sqlite_in_use test_faults test_disk_full_checkpoint test_powercut \
  test_durability test_payload_as_stored test_meta test_migrations test_check test_errors \
  test_arguments_low test_shell test_memory test_wait_idle test_host
test-python-current: deps $(EXT) node/node_modules
	TINYQ_SOAK_SECONDS=0 bash scripts/sqlite_current.sh $(PY) -m pytest -q $(PYTEST_PAR) \
	  $(foreach t,$(VERSION_DEPENDENT),$(wildcard tests/$(t).py))

# The whole Python suite again on the current SQLite (test-all). What is about time,
# processes, packaging or the helpers' own Python logic runs once, in test-python: the
# soak and the clock jumps (TINYQ_SOAK_SECONDS=0) and the files of ONCE_ONLY, whose SQL is
# the same functions the rest of the suite calls directly.
ONCE_ONLY = test_release test_platforms test_wasi test_rust_crate test_install test_demo test_dashboard \
  test_helper_scenarios test_helper_stop test_helper_threads_fail test_queue_work_guard \
  test_asyncio_helper test_asyncio_work_rules test_python_helper test_workflow_helpers \
  test_helpers_keys test_litestream test_cli_exits test_prefork test_stores
test-python-current-all: deps $(EXT) node/node_modules
	TINYQ_FULL=1 TINYQ_SOAK_SECONDS=0 bash scripts/sqlite_current.sh $(PY) -m pytest -q $(PYTEST_PAR) tests \
	  $(foreach t,$(ONCE_ONLY),--ignore=tests/$(t).py)

# Node helper: better-sqlite3 12 (13 needs Node 22); npm may skip the native build.
node/node_modules: node/package.json | deps
	cd node && npm install --no-audit --no-fund --loglevel=error
	@cd node && node -e "require('better-sqlite3')" 2>/dev/null || \
	  (cd node_modules/better-sqlite3 && npx --yes node-gyp rebuild --release)
	@touch node/node_modules

test-node: deps $(EXT) node/node_modules
	cd node && node --test test/

# The same Node tests on node:sqlite (Nodes 22.13 and 24 from npm) and on Bun's bun:sqlite and node:sqlite
# (Bun from npm), installed once under target/drivers/npm. About 2.5 minutes, one after another.
test-node-drivers: deps $(EXT) node/node_modules
	bash tests/drivers/node_helper_suite.sh

# One scenario (tests/drivers/scenario.json) through every driver of docs/drivers.md, and PHP's
# query() trap pinned; installs what is missing (Debian, Bun/Deno from npm, rusqlite from
# crates.io), builds under target/drivers/. Warm: a few seconds. TINYQ_DRIVERS="php go" for some.
test-drivers: deps $(EXT) node/node_modules
	PY=$(PY) bash tests/drivers/run.sh

# Three dqlite nodes on 127.0.0.1 (Debian go-dqlite + libdqlite0, installed if missing) with
# tinyq preloaded; the leader is SIGKILLed mid-work. About 15 s.
test-cluster: deps $(EXT)
	$(PY) tests/cluster/run_cluster.py

# Python and Node producers, 8 workers SIGKILLed at random, limits on, for 10 minutes, audited
# from tq_watch (tests/support/soak.py; a 60-second version runs in make test: tests/test_soak.py).
SOAK_SECONDS ?= 600
soak: deps $(EXT) node/node_modules
	$(PY) tests/support/soak.py --seconds $(SOAK_SECONDS)

# tinyq beside a hand-written SQL queue and the peers (honker, litequeue, persist-queue,
# huey; set up under bench/work/ on first run): bench/results/latest.md and peers.md.
# bench/workers.py: the worker helpers (threads, asyncio, Node) beside huey's consumer,
# liteque and plainjob (npm, under bench/work/node/): bench/results/workers.md.
# bench/idle.py: CPU of 1, 20 and 100 idle work() calls and the add-to-start latency: bench/results/idle.md.
# bench/scale.py: the cost of one call as the store grows (COST-01): bench/results/scale.md and scale.png.
# BENCH_BEFORE: the helpers as of that commit are measured beside the current ones in
# bench/workers.py (the last commit before group commit, issue 25: its "before").
BENCH_BEFORE ?= 783af4e
# LIFECYCLE_BEFORE: the path of an older build's tinyq.so (for example a copy of main's);
# bench/lifecycle.py then runs it and this one side by side ("before", "after").
LIFECYCLE_BEFORE ?=
LIFECYCLE_BUILDS = $(if $(LIFECYCLE_BEFORE),--ext before=$(LIFECYCLE_BEFORE) --ext after=$(EXT))
bench: deps $(EXT) node/node_modules
	$(PY) bench/lifecycle.py $(LIFECYCLE_BUILDS)
	$(PY) bench/lifecycle.py --floor-variants
	$(PY) bench/peers.py
	$(PY) bench/workers.py --before $(BENCH_BEFORE)
	$(PY) bench/idle.py
	$(PY) bench/scale.py
	$(PY) bench/timeline.py
	$(PY) bench/durability.py

bench-quick: deps $(EXT) node/node_modules
	$(PY) bench/lifecycle.py --quick $(LIFECYCLE_BUILDS)
	$(PY) bench/lifecycle.py --quick --floor-variants
	$(PY) bench/peers.py --quick
	$(PY) bench/workers.py --quick --before $(BENCH_BEFORE)
	$(PY) bench/idle.py --quick
	$(PY) bench/scale.py --quick
	$(PY) bench/timeline.py --quick
	$(PY) bench/durability.py --quick

# docs/dashboard.png, dashboard-lists.png, dashboard-job.png and dashboard-blocked.png, from the
# headless Chromium tests.
screenshots: deps $(EXT)
	TINYQ_SCREENSHOTS=docs $(PY) -m pytest -q tests/test_dashboard.py tests/test_workflow_operators.py -k chromium

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib

# `.load tinyq` from any folder. SQLite dlopen()s "tinyq", then "tinyq.so"; for a bare name
# the loader looks in LD_LIBRARY_PATH, then ld.so.cache, which ldconfig fills only with
# files named lib*: so the file is libtinyq.so, whose soname is tinyq.so (build.rs), and
# ldconfig lists it under that name. tinyq.so is also a link to it, for `.load tinyq.so`
# with LD_LIBRARY_PATH and for DESTDIR (package) builds, where ldconfig is not run.
install: $(EXT)
	install -d $(DESTDIR)$(LIBDIR)
	install -m 0755 $(EXT) $(DESTDIR)$(LIBDIR)/libtinyq.so.tmp
	mv -f $(DESTDIR)$(LIBDIR)/libtinyq.so.tmp $(DESTDIR)$(LIBDIR)/libtinyq.so
	ln -sf libtinyq.so $(DESTDIR)$(LIBDIR)/tinyq.so
	@if [ -z "$(DESTDIR)" ]; then ldconfig; fi

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/tinyq.so $(DESTDIR)$(LIBDIR)/libtinyq.so
	@if [ -z "$(DESTDIR)" ]; then ldconfig; fi

# The Python package (helper, `tinyq` command, dashboard and the extension) as a wheel in
# dist/. Offline: the build backend is python/_tinyq_build.py (standard library only).
wheel: $(EXT)
	$(PY) -m pip wheel --no-deps --no-index --quiet -w dist ./python

# The npm package as dist/tinyq-<version>.tgz, with dist/tinyq.so as this machine's build
# (node/pack.js: prebuilds/<platform>-<arch>/tinyq.so, the version from Cargo.toml).
npm-pack: $(EXT)
	node node/pack.js dist "$$(node -p 'process.platform + "-" + process.arch')=$(EXT)"

# Everything a release publishes, built and tried, in dist/release/ (scripts/release.sh):
# the tarballs, the manylinux2014 wheels and the tinyq.so of x86_64 and aarch64 (glibc 2.17),
# the npm tarball with both, the crate. Not part of `make test`: 27 minutes from a fresh clone
# on a busy 2-core machine (7 of them better-sqlite3's build for node/node_modules), 4 warm.
release: node/node_modules | deps
	PY=$(PY) bash scripts/release.sh

# Installs that tarball into a temporary project and uses it there (better-sqlite3 compiles: 1-3 min).
test-npm-package: deps $(EXT)
	TINYQ_TEST_NPM=1 $(PY) -m pytest -q tests/test_install.py -k npm

clean:
	rm -rf dist target

# tinyq beside the server-backed queues a team would pick instead (issue 45): Node's work()
# vs BullMQ (Redis), pg-boss and graphile-worker (PostgreSQL); Queue.work / AsyncQueue.work vs
# RQ (Redis) and procrastinate (PostgreSQL), at matched durability, side by side in one run.
# Starts its own redis-server and PostgreSQL (Debian packages, apt-get installed if missing) on
# free local ports in a folder under bench/work/, stops them after; npm and PyPI peers go to
# bench/work/ too. Root (runs PostgreSQL as `postgres`). Not in `make test` or `make bench`:
# about 30 min (SYSTEMS_ARGS=--quick: a few). Writes bench/results/systems.md and systems-*.png.
.PHONY: bench-systems
bench-systems: deps $(EXT) node/node_modules
	$(PY) bench/servers.py $(SYSTEMS_ARGS)
