# mend developer tasks. Run `make` (or `make help`) to list them.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

GO ?= go
# Extra flags for `go test`, e.g. make test TESTFLAGS='-run TestLease -v'.
TESTFLAGS ?=
# Packages `make test` runs, e.g. make test PKGS=./storage/...
PKGS ?= ./...
# ENGINE=mysql|mariadb picks the server engine of test, demo and bench (MEND_TEST_ENGINE). Unset,
# the harness uses MySQL, the engine the real submit queue runs on, and falls back to MariaDB
# (saying so) on a machine that has no MySQL image or binary.
ENGINE ?=
ifneq ($(strip $(ENGINE)),)
export MEND_TEST_ENGINE := $(ENGINE)
endif
# Per-package test timeout: a hung test fails with a stack dump; 12m leaves room for a busy machine (issue 28).
TEST_TIMEOUT ?= 12m
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# How long `make fuzz` runs each fuzz test.
FUZZTIME ?= 30s

# GOFLAGS from the environment is honoured (e.g. GOFLAGS=-mod=mod); we only add -mod=readonly
# when it is unset, so no target ever rewrites go.mod or go.sum behind the developer's back.
ifeq ($(strip $(GOFLAGS)),)
export GOFLAGS := -mod=readonly
endif

.PHONY: help build test test-all test-vitess lint fuzz demo alerts-test

help: ## List the documented targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# bin/mend says which source it was built from (mend version, mend_build_info) even when -buildvcs is off
# (GOFLAGS=-buildvcs=false) or the Go tool cannot read the checkout: the version and revision are set explicitly.
MEND_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
MEND_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
MEND_LDFLAGS := -X main.version=$(MEND_VERSION) -X main.revision=$(MEND_REVISION)

build: ## Compile every package (and bin/mend when cmd/mend exists)
	$(GO) build ./...
	@if [[ -d cmd/mend ]]; then echo "$(GO) build -ldflags '$(MEND_LDFLAGS)' -o bin/mend ./cmd/mend"; $(GO) build -ldflags '$(MEND_LDFLAGS)' -o bin/mend ./cmd/mend; fi

demo: ## Run the stuck-queue demo on a throwaway server and print its timeline (start here)
	@# A server is needed only when MEND_TEST_DSN names none (the demo never reads MEND_DSN): the script finds
	@# (or builds, or installs as root on Debian) what the demo's discovery will use: a container
	@# image when a Docker engine answers, else a local mariadbd.
	@if [[ -z "$${MEND_TEST_DSN:-}" ]]; then bash scripts/ensure-mysql.sh; fi
	$(GO) build -o bin/mend ./cmd/mend
	./bin/mend demo

test: ## Run unit, integration and end-to-end tests with -race against a real server (ENGINE=mysql|mariadb, TESTFLAGS=...)
	bash scripts/ensure-mysql.sh
	@report="$$(mktemp)"; status=0; \
	MEND_TEST_REPORT="$$report" $(GO) test -race -count=1 -timeout=$(TEST_TIMEOUT) $(TESTFLAGS) $(PKGS) || status=$$?; \
	echo "== servers the test packages used (package: engine version via backend) =="; sort "$$report"; rm -f "$$report"; \
	bash scripts/docker-leftovers.sh || status=1; exit $$status

test-all: ## Run make test once per engine: MySQL, then MariaDB
	$(MAKE) test ENGINE=mysql
	$(MAKE) test ENGINE=mariadb

# make test-under-load (issue 28): make test while Debian's stress-ng keeps every CPU busy, as a
# loaded CI runner or a laptop compiling beside the suite would. Tests decide on hooks, manual
# clocks and the database clock, so a slow machine only makes them slower. ENGINE, PKGS and
# TESTFLAGS pass through; LOAD_CPUS=0 (stress-ng's "all online CPUs") sets the hog's workers.
# The hog runs in its own session and is stopped on exit however the run ends (and gives up by
# itself after LOAD_LIMIT, should the trap never run).
LOAD_CPUS ?= 0
LOAD_LIMIT ?= 3h
# The hog takes half of every core, so each package gets more than TEST_TIMEOUT's 12 minutes.
LOAD_TEST_TIMEOUT ?= 20m
.PHONY: test-under-load
test-under-load: ## Run make test (ENGINE=, PKGS=, TESTFLAGS= as there) while stress-ng keeps every CPU busy; the hog stops on exit
	@command -v stress-ng >/dev/null || { echo "test-under-load: stress-ng is not installed (Debian: apt-get install stress-ng)"; exit 1; }
	@setsid stress-ng --cpu $(LOAD_CPUS) --timeout $(LOAD_LIMIT) --quiet & hog=$$!; \
	trap 'kill -TERM -- -$$hog 2>/dev/null || true; wait $$hog 2>/dev/null || true' EXIT; trap 'exit 130' INT TERM HUP; \
	echo "test-under-load: stress-ng --cpu $(LOAD_CPUS) (session $$hog) keeps the CPUs busy"; \
	start=$$(date +%s); status=0; \
	$(MAKE) --no-print-directory test TEST_TIMEOUT=$(LOAD_TEST_TIMEOUT) || status=$$?; \
	echo "test-under-load: ENGINE=$(or $(ENGINE),default) took $$(( $$(date +%s) - start ))s under the hog; exit $$status"; \
	exit $$status

# The packages make test-vitess runs through vtgate with -race (see docs/scaling.md), and the
# tests of ./itest/ it runs there without -race, as make test does not either: all of them (the
# porcupine suites of the store and the fence, the planner/reconciler end-to-end scenarios on the
# host's real tables, the CLI); those that cannot run through vtgate skip, saying why.
VITESS_PKGS ?= ./internal/vitessdb/ ./storage/ ./fence/ ./reconcile/
VITESS_ITEST ?= .

test-vitess: ## Run the storage, fence and reconcile suites, the porcupine proofs and the end-to-end scenarios through vtgate on a 2-shard Vitess cluster (builds Vitess once into ~/.cache/mend; first build ~15 min)
	bash scripts/vitess.sh >/dev/null
	@report="$$(mktemp)"; status=0; \
	MEND_TEST_ENGINE=vitess MEND_TEST_REPORT="$$report" $(GO) test -race -count=1 -timeout=$(TEST_TIMEOUT) $(TESTFLAGS) $(VITESS_PKGS) || status=$$?; \
	MEND_TEST_ENGINE=vitess MEND_TEST_REPORT="$$report" $(GO) test -count=1 -timeout=$(TEST_TIMEOUT) -run '$(VITESS_ITEST)' ./itest/ || status=$$?; \
	echo "== servers the test packages used (package: engine version via backend) =="; sort "$$report"; rm -f "$$report"; \
	bash scripts/vitess-leftovers.sh || status=1; exit $$status

# make test-vitess-failover (issue 34): a production-shaped Vitess cluster (internal/vitesscluster: etcd,
# vtctld, vtgate, per shard a primary and two replicas each with its own mysqld, durability semi_sync), then
# mend's failover scenario on it (itest's TestVitessFailover, with its negative control) and the cluster's own
# test (acknowledged writes survive a planned and an emergency reparent). The host's tables are on a local
# mysqld of the harness (MEND_TEST_BACKEND=local unless set: no container to race other runs' reaping; ENGINE=
# as elsewhere). One cluster per package, one package at a time (-p 1): each is 7 processes per shard.
.PHONY: test-vitess-failover
test-vitess-failover: ## Run the failover scenario (storm through vtgate, PlannedReparentShard of each shard, kill -9 of a primary + EmergencyReparentShard) on a multi-process semi-sync Vitess cluster, with its negative control
	bash scripts/ensure-mysql.sh
	bash scripts/vitess.sh --cluster >/dev/null
	@report="$$(mktemp)"; status=0; start=$$(date +%s); \
	MEND_TEST_VITESS_CLUSTER=1 MEND_TEST_BACKEND="$${MEND_TEST_BACKEND:-local}" MEND_TEST_REPORT="$$report" $(GO) test -p 1 -count=1 -timeout=$(TEST_TIMEOUT) -v \
		-run '^(TestClusterKeepsAcknowledgedWrites|TestVitessFailover)$$' ./internal/vitesscluster/ ./itest/ || status=$$?; \
	echo "== servers the test packages used (package: engine version via backend) =="; sort "$$report"; rm -f "$$report"; \
	echo "test-vitess-failover: $$(( $$(date +%s) - start )) s"; \
	bash scripts/vitess-leftovers.sh || status=1; bash scripts/docker-leftovers.sh || status=1; exit $$status

# make test-realqueue (issue 42): mend beside the real uber/submitqueue. itest/realqueue builds the queue's
# gateway, orchestrator and runway from its source (SQ_SOURCE=<dir>, else ../shared/submitqueue-src's
# tarball; cached in ~/.cache/mend/submitqueue-<commit>), runs them on the test MySQL (the queue runs on no
# other engine) and mend's binary beside them; every scenario has a control without mend that must stay
# stuck. make test skips the package (it needs MEND_TEST_REALQUEUE=1). RUN= selects tests (go test -run).
RUN ?= .
.PHONY: test-realqueue
test-realqueue: ## Run the real-queue suite: uber/submitqueue's own services from source, mend beside them, on MySQL (first build ~1 min; ~14 min)
	MEND_TEST_ENGINE=mysql bash scripts/ensure-mysql.sh
	@start=$$(date +%s); status=0; \
	MEND_TEST_REALQUEUE=1 MEND_TEST_ENGINE=mysql $(GO) test -race -count=1 -timeout=30m -v -run '$(RUN)' ./itest/realqueue/ || status=$$?; \
	echo "test-realqueue: $$(( $$(date +%s) - start )) s"; \
	bash scripts/docker-leftovers.sh || status=1; exit $$status

lint: ## Check formatting (gofmt), go vet and staticcheck
	@out="$$(gofmt -l .)"; if [[ -n "$$out" ]]; then echo "gofmt: these files need formatting:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOFLAGS= $(GO) run $(STATICCHECK) ./...

alerts-test: ## Check the Prometheus alert rules in deploy/prometheus/ and run their unit tests (promtool, Debian's prometheus package)
	promtool check rules deploy/prometheus/mend-alerts.yml
	promtool test rules deploy/prometheus/mend-alerts.test.yml

fuzz: ## Run every Fuzz* test in the module for FUZZTIME each (default 30s)
	@grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u | while read -r dir; do \
		for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$dir"/*_test.go); do \
			echo "$(GO) test -run='^$$' -fuzz='^$$fn$$' -fuzztime=$(FUZZTIME) $$dir"; \
			$(GO) test -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) "$$dir"; \
		done; \
	done

.PHONY: bench bench-smoke bench-scale bench-vitess proof

# make bench writes docs/benchmarks.md from a run on MySQL (the default engine, the one the real queue
# runs on); make bench ENGINE=mariadb writes docs/benchmarks-mariadb.md.
BENCH_OUT = docs/benchmarks$(if $(filter mariadb,$(MEND_TEST_ENGINE)),-mariadb,).md
bench: ## Benchmark mend against a replay of its statements and the fewest-round-trip limit (same run), write docs/benchmarks.md (MySQL) or docs/benchmarks-mariadb.md (ENGINE=mariadb) (< 10 min)
	bash scripts/ensure-mysql.sh
	$(GO) run ./bench/cmd/benchreport -out $(BENCH_OUT)

bench-smoke: ## Run every benchmark once at a small size past the planner's RunLimit and check it still works (CI; about 3 min on a quiet machine)
	bash scripts/ensure-mysql.sh
	$(GO) run ./bench/cmd/benchreport -smoke

# MEND_BENCH_SCALE=smoke (or key=value sizes, see bench/scale_test.go) runs a small world instead of the full one.
# Without Docker's port proxy in front of the server (issue 50): MEND_TEST_BACKEND=local MEND_TEST_ENGINE=mysql make
# bench-scale SCALE_OUT=docs/benchmarks-scale-local.md (a local mysqld, from scripts/mysql-rootfs.sh when none is on PATH).
SCALE_OUT = docs/benchmarks-scale$(if $(filter mariadb,$(MEND_TEST_ENGINE)),-mariadb,).md
bench-scale: ## Benchmark the reconcilers at scale (10,000 queues, 10^6 finished, a 100,000 dead-letter storm) and write docs/benchmarks-scale.md (MySQL) or docs/benchmarks-scale-mariadb.md (ENGINE=mariadb) (> 10 min, bounded)
	bash scripts/ensure-mysql.sh
	$(GO) run ./bench/cmd/benchreport -scale -out $(SCALE_OUT)

bench-vitess: ## Benchmark intake, fenced append, lease acquire, repair, the due listing at 10,000 queues and a 10,000 dead-letter storm through vtgate (2 shards) beside one MySQL, same run; write docs/benchmarks-vitess.md (~15 min)
	bash scripts/vitess.sh >/dev/null
	$(GO) run ./bench/cmd/benchreport -vitess -ops 1000 -out docs/benchmarks-vitess.md
	bash scripts/vitess-leftovers.sh

# The proof suites at full size: linearizability (store and fence, with their negative controls), crash and
# partition. `make test` runs the same tests at reduced sizes.
PROOF_TESTS ?= ^(TestLinear|TestFenceLinear|TestCrash|TestPartition|TestPause)
proof: ## Run the linearizability, crash and partition suites at full size and print what they checked
	bash scripts/ensure-mysql.sh
	@out="$$(mktemp)"; status=0; \
	MEND_PROOF=full $(GO) test -count=1 -timeout=30m -v -run '$(PROOF_TESTS)' ./itest 2>&1 | tee "$$out" || status=$$?; \
	MEND_SIM_SEEDS=$(SIM_PROOF_SEEDS) $(GO) test -count=1 -timeout=30m -v -run '^TestSimulation' ./subscribe 2>&1 | tee -a "$$out" || status=$$?; \
	echo; echo "== what the proof suites checked =="; grep -ho 'PROOF .*' "$$out" || true; rm -f "$$out"; exit $$status
# The subscription's simulation (subscribe/sim_test.go): make test runs 1,000 seeds, make proof this many.
SIM_PROOF_SEEDS ?= 20000

# Issue 32: the container image (deploy/image/Dockerfile; scripts/image.sh stages and builds it).
.PHONY: image
image: ## Build mend's container image FROM scratch (static binary, CA bundle, user 65532) as mend:<version> and mend:latest; no registry needed
	bash scripts/image.sh
