# Targets for building, running and testing the gateway. Run `make` for the list.
#
# Local services (PostgreSQL, and Redis for tests) live under .data/ and are
# managed by cmd/devstack; their URLs are in .data/services.env once started.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-print-directory

GO ?= go
FUZZTIME ?= 30s
BENCHTIME ?= 10s
FLEET_ROUNDS ?= 10

DATA := .data
ENV_FILE := $(DATA)/services.env
DEVSTACK := $(GO) run ./cmd/devstack
BENCH_DIRS := codec hotpath proxy

# staticcheck 2026.2.2; the module's v0.x version is what `go run` pins.
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

# Go files git tracks or would add (untracked but not ignored), that exist.
GO_FILES = $(wildcard $(shell git ls-files --cached --others --exclude-standard -- '*.go' 2>/dev/null \
	|| find . -name '*.go' -not -path './.data/*'))

# Run a command with the variables of .data/services.env exported.
with_services = set -a; source $(ENV_FILE); set +a;

# The environment reaches every recipe as it is; these are named to say that
# CI (tests fail rather than skip when a service is missing under CI=true) and
# GATEWAY_ADDR (the address `make run` listens on) are passed on unchanged.
ifneq ($(origin CI),undefined)
export CI
endif
ifneq ($(origin GATEWAY_ADDR),undefined)
export GATEWAY_ADDR
endif

.PHONY: help
help: ## Show this list of targets
	@echo 'usage: make <target> [FUZZTIME=30s] [BENCHTIME=10s]'
	@echo
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the gateway and gwbench into .data/bin
	$(GO) build -ldflags "-X main.commit=$$(git rev-parse HEAD 2>/dev/null || echo unknown)" -o $(DATA)/bin/gateway ./cmd/gateway
	$(GO) build -o $(DATA)/bin/gwbench ./cmd/gwbench

.PHONY: run
run: build ## Start PostgreSQL and serve the gateway with a demo key (GATEWAY_ADDR sets the address)
	$(DEVSTACK) up
	$(with_services) exec $(DATA)/bin/gateway serve --demo

.PHONY: services
services: ## Start PostgreSQL and Redis under .data (idempotent)
	$(DEVSTACK) up --redis

.PHONY: services-stop
services-stop: ## Stop the PostgreSQL and Redis servers under .data
	$(DEVSTACK) down

# The packages whose goroutines share connections, streams and counters:
# make test runs them again under the race detector.
RACE_PKGS := ./proxy ./hotpath/... ./storage ./cmd/gateway

.PHONY: test
test: services ## Start the services, vet, run every test once, then the concurrent packages under the race detector
	$(GO) vet ./...
	$(with_services) $(GO) test -count=1 ./...
	$(with_services) $(GO) test -race -count=1 $(RACE_PKGS)

.PHONY: fleet
fleet: services ## Rolling restarts of a three-process fleet behind a TCP balancer under load, FLEET_ROUNDS times (default 10); fails on any failed request or lost ledger row
	$(with_services) GATEWAY_FLEET_ROUNDS=$(FLEET_ROUNDS) $(GO) test -count=1 -v -timeout 30m -run 'TestRollingRestartLosesNothing' ./cmd/gateway

.PHONY: bench
bench: build ## Hot-path micro-benchmarks, then a short gateway-vs-direct comparison and the failover scorecard (reports in bench/results/)
	@mkdir -p bench/results
	@dirs=(); for d in $(BENCH_DIRS); do if [ -d "$$d" ]; then dirs+=("./$$d/..."); fi; done; \
	$(GO) test -run '^$$' -bench . -benchmem "$${dirs[@]}" | tee bench/results/micro.txt
	$(DEVSTACK) up
	$(with_services) $(DATA)/bin/gwbench local --frontier --duration $(BENCHTIME) --out bench/results/latest

.PHONY: lint
lint: ## Run go vet and staticcheck
	$(GO) vet ./...
	$(STATICCHECK) ./...

.PHONY: fmt
fmt: ## Format the Go files with gofmt
	@files='$(GO_FILES)'; if [ -n "$$files" ]; then gofmt -w $$files; fi

.PHONY: fmt-check
fmt-check: ## Fail when a Go file is not gofmt-formatted
	@files='$(GO_FILES)'; [ -n "$$files" ] || exit 0; \
	bad=$$(gofmt -l $$files); \
	if [ -n "$$bad" ]; then echo "gofmt would change these files (run make fmt):"; echo "$$bad"; exit 1; fi

.PHONY: fuzz
fuzz: ## Run each FuzzX target for FUZZTIME (default 30s), one at a time
	@targets=$$(grep -rHoE --include='*_test.go' --exclude-dir=.data --exclude-dir=.git --exclude-dir=testdata \
		'^func Fuzz[A-Za-z0-9_]*' . | sed -E 's/:func /:/' | sort -u); \
	if [ -z "$$targets" ]; then echo "fuzz: no FuzzX targets yet"; exit 0; fi; \
	while IFS=: read -r file name; do \
		pkg="./$$(dirname "$${file#./}")"; \
		echo "fuzz: $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg" </dev/null; \
	done <<< "$$targets"

.PHONY: check
check: fmt-check lint services ## Check formatting, vet and staticcheck, then run the race tests with the services
	$(with_services) $(GO) test -race -count=1 ./...

.PHONY: clean
clean: ## Remove built binaries and cached test results (keeps the database)
	rm -rf $(DATA)/bin
	$(GO) clean -testcache

.PHONY: clean-data
clean-data: ## Stop the services and delete .data, database included
	$(DEVSTACK) down
	rm -rf $(DATA)
