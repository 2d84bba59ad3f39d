# The single entry point for people and CI. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never
# Tools installed in the venv (protoc plugins among them) come first.
export PATH := $(abspath $(VENV))/bin:$(PATH)
PROTO_FILES := $(wildcard proto/trajgrade/v1/*.proto)

.PHONY: help ## list the targets
help:
	@grep -E '^\.PHONY: [a-z-]+ ## ' $(MAKEFILE_LIST) | sed -E 's/^\.PHONY: ([a-z-]+) ## (.*)/  \1\t\2/'

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

.PHONY: install ## create .venv, install dev dependencies, build the extension (safe to rerun)
install: | $(PY)
	$(PY) -m pip install -q 'maturin>=1.9,<2'
	$(BIN)/maturin develop -q -E dev

.PHONY: build-dev ## rebuild the extension (debug) into the venv
build-dev: | $(PY)
	$(BIN)/maturin develop -q

.PHONY: build-prod ## build the extension in release mode into the venv
build-prod: | $(PY)
	$(BIN)/maturin develop -q --release

.PHONY: proto ## regenerate python/trajgrade/v1 from proto/
proto: | $(PY)
	$(PY) -m grpc_tools.protoc -I proto --python_out=python --mypy_out=python \
		--grpc_python_out=python --mypy_grpc_out=python $(PROTO_FILES)

.PHONY: format ## apply ruff and rustfmt
format:
	$(BIN)/ruff check --fix python tests bench
	$(BIN)/ruff format python tests bench
	cd rust && $(CARGO) fmt --all

.PHONY: lint ## ruff, rustfmt, clippy, proto drift check
lint:
	$(BIN)/ruff check python tests bench
	$(BIN)/ruff format --check python tests bench
	cd rust && $(CARGO) fmt --all --check
	cd rust && $(CARGO) clippy --workspace --all-targets -q -- -D warnings
	$(MAKE) -s proto && git diff --exit-code -- python/trajgrade/v1

.PHONY: typecheck ## mypy --strict (package and tests/test_typing.py) and stubtest
typecheck:
	$(BIN)/mypy
	$(BIN)/mypy tests/test_typing.py
	$(BIN)/python -m mypy.stubtest trajgrade._core --allowlist .mypy-stubtest-allowlist

.PHONY: test-rust ## cargo test (pure core, no Python needed)
test-rust:
	cd rust && $(CARGO) test --workspace -q

.PHONY: test-fast ## pytest only (inner loop)
test-fast:
	$(BIN)/pytest -q

.PHONY: test ## install, lint, typecheck, Rust tests, pytest: the README and CI command
test: install lint typecheck test-rust test-fast

.PHONY: serve ## install and run the server on loopback
serve: install
	$(BIN)/trajgrade serve

.PHONY: bench ## release build and the benchmark tables
bench: install build-prod
	$(PY) bench/bench_core.py

.PHONY: deps-system ## system packages the tests need (headless Chromium for the report test)
deps-system:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }

.PHONY: bench-regrade ## release build, then regrade throughput and peak RSS at 100k vs 1M traces
bench-regrade: install build-prod
	$(PY) bench/bench_regrade.py --sizes 100000,1000000
