# tinyq: `make` builds dist/tinyq.so; `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
PY ?= /usr/bin/python3
CARGO ?= cargo
EXT := dist/tinyq.so

.PHONY: all loadable deps demo test test-rust test-python test-shell bench clean

all: loadable

# Everything the build and the tests need that a fresh machine lacks.
deps:
	@missing=""; \
	dpkg -s libclang-dev >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	command -v sqlite3 >/dev/null 2>&1 || missing="$$missing sqlite3"; \
	$(PY) -c 'import pytest' >/dev/null 2>&1 || missing="$$missing python3-pytest"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

loadable: $(EXT)

$(EXT): deps $(shell find src sql -type f 2>/dev/null) Cargo.toml
	$(CARGO) build --release --lib
	@mkdir -p dist
	@# copy then rename: a process that has the old file loaded keeps a valid mapping
	cp target/release/libtinyq.so $(EXT).tmp && mv -f $(EXT).tmp $(EXT)

demo: $(EXT)
	$(PY) examples/demo.py

test: $(EXT) test-rust test-python

test-rust: deps
	$(CARGO) test --release --lib

test-python: $(EXT)
	$(PY) -m pytest -q tests

bench: $(EXT)
	$(PY) bench/lifecycle.py

clean:
	rm -rf dist target
