# Sluice developer tasks. `make` (or `make help`) lists them.

GO                   ?= go
GOFMT                ?= gofmt
# v1.9.1 (server 1.32) cannot be built from the module proxy: its go.mod replaces the nested
# module cliext, which the proxy does not serve. v1.5.1 (server 1.29) builds cleanly.
TEMPORAL_CLI_VERSION ?= v1.5.1
BIN                  := $(CURDIR)/bin

# The flags of `make test`, shared by test-stress. -timeout is an outer bound for a busy machine.
TEST_FLAGS  := -race -count=1 -timeout 30m
STRESS_RUNS ?= 10

BENCH       ?= .
BENCH_COUNT ?= 5
BENCHTIME   ?= 2s

WITH_PG := $(CURDIR)/scripts/with-postgres.sh

# The top-level directories that hold the module's Go files, for gofmt: not clients/ nor
# samples/typescript, whose npm dependencies (node_modules) hold Go files that are not the module's
# (go.mod ignores them too).
GO_DIRS := $(filter-out clients bin samples,$(patsubst %/,%,$(wildcard */))) \
	$(filter-out samples/typescript,$(patsubst %/,%,$(wildcard samples/*/))) $(wildcard *.go)

.DEFAULT_GOAL := help

.PHONY: help api-check ts-client ts-sample test test-short test-stress test-faults soak sim bench bench-gate bench-go lint demo demo-anthropic demo-typescript explain-accuracy explain-demo tidy fmt clean

help: ## Show this help
	@awk 'BEGIN { FS = ":[^#]*## "; printf "Usage: make <target>\n\nTargets:\n" } \
		/^[a-zA-Z0-9_.\/-]+:[^#]*## / { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

# A real file target, so the pinned CLI is built once. The version stamp
# makes a bin/temporal built at any other version (or by hand) get rebuilt
# when TEMPORAL_CLI_VERSION changes.
TEMPORAL_STAMP := bin/.temporal-cli-$(TEMPORAL_CLI_VERSION)

bin/temporal: $(TEMPORAL_STAMP) ## Build the pinned Temporal CLI (dev server) into bin/
	@echo "building the Temporal CLI $(TEMPORAL_CLI_VERSION) (its dev server) into bin/: once, a few minutes"
	GOBIN=$(BIN) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)
	@touch $@

$(TEMPORAL_STAMP):
	@mkdir -p $(BIN)
	@rm -f bin/.temporal-cli-*
	@touch $@

# The sluice command, stamped with the release tag when HEAD is one and the tree is clean, else with
# the commit ("-dirty" when the tree has uncommitted changes): a clone need not carry tags (CI's does
# not), and Go embeds no VCS information in a git worktree nor under -buildvcs=false. `bin/sluice
# version` then names a commit as a version after the last release the tree records
# (api/releases.txt, copied in cmd/sluice/internal/cli's lastRelease): v0.1.1-dev+89a31b2c3d4e.
SLUICE_VERSION = $(shell git describe --tags --exact-match --match 'v[0-9]*' --dirty 2>/dev/null | grep -v -e '-dirty$$' || git describe --always --dirty --abbrev=12 --exclude '*' 2>/dev/null)

.PHONY: bin/sluice
bin/sluice: ## Build the sluice command into bin/, its version stamped from git describe
	$(GO) build -ldflags "-X github.com/sluicehq/sluice/cmd/sluice/internal/cli.stampedVersion=$(SLUICE_VERSION)" -o $(BIN)/sluice ./cmd/sluice

# The TypeScript client (clients/typescript): its locked dependencies, its build and its unit tests. The
# gate's Go tests run its compiled test worker (clients/typescript/dist), so make test builds it first.
ts-client: ## Build the TypeScript client and run its unit tests (needs node and npm)
	cd clients/typescript && npm ci --no-audit --no-fund && npm run build && npm test

# The TypeScript sample (samples/typescript): its locked dependencies, the client among them (a copy
# of clients/typescript's build, so ts-client first), and its build, which make demo-typescript runs.
ts-sample: ts-client ## Build the TypeScript sample of make demo-typescript (needs node and npm)
	cd samples/typescript && npm ci --no-audit --no-fund && npm run build

test: bin/temporal ts-client ts-sample ## Run all tests with the race detector against a real Postgres and Temporal dev server
	SLUICE_TEMPORAL_CLI=$(BIN)/temporal $(WITH_PG) $(GO) test $(TEST_FLAGS) ./...
	cd bench && $(WITH_PG) $(GO) test $(TEST_FLAGS) ./...

test-short: bin/temporal ## Run the tests with -short (race detector, real Postgres and Temporal)
	SLUICE_TEMPORAL_CLI=$(BIN)/temporal $(WITH_PG) $(GO) test $(TEST_FLAGS) -short ./...

test-stress: bin/temporal ## Run the suite STRESS_RUNS times (10) under a CPU burner of 2 x cores; prints passes per test
	GO_TEST="$(GO) test $(TEST_FLAGS)" SLUICE_TEMPORAL_CLI=$(BIN)/temporal $(WITH_PG) scripts/stress.sh $(STRESS_RUNS)

test-faults: bin/temporal ## Run the fault-tolerance scenarios in their long form (kills, Postgres restart, Temporal outage, bad input)
	SLUICE_FAULTS=full SLUICE_TEMPORAL_CLI=$(BIN)/temporal $(WITH_PG) $(GO) test -race -count=1 -run 'Faults' -timeout 20m -v ./interceptor/

# SOAK is how long the soak's stream of workflows runs; the drain and the checks come after it.
SOAK ?= 30m

soak: bin/temporal ## 8 worker processes, 104 keys, random faults for SOAK (30m); prints the counts (not in CI)
	@mkdir -p $(BIN)
	bash -o pipefail -c "SLUICE_SOAK=$(SOAK) SLUICE_TEMPORAL_CLI=$(BIN)/temporal $(WITH_PG) $(GO) test -count=1 -run '^TestSoak$$' -timeout 120m -v ./interceptor/ | tee $(BIN)/soak.txt | grep -E '^(SOAK|--- |ok|FAIL|panic)'"

# SIM_TIME is how long `make sim` searches; SEED fixes rapid's seed (one round of its checks);
# REPLAY is a fail file a failed run wrote (it prints the path), replayed exactly.
SIM_TIME ?= 5m
SEED     ?=
REPLAY   ?=

sim: ## The simulation of admission: random runs against the real engine for SIM_TIME (5m); SEED=, REPLAY=FILE
	bash -o pipefail -c "SIM_TIME=$(if $(REPLAY),,$(SIM_TIME)) SEED=$(SEED) $(WITH_PG) $(GO) test -count=1 -run '^TestSim\$$' -timeout 0 -v ./internal/sim/ \
		$(if $(REPLAY),-rapid.failfile=$(abspath $(REPLAY)),) | grep -E '^(=== RUN|--- |ok|FAIL|panic)|SIM:|\[rapid\]|sim_test.go|model:|^ {8}'"

bench: bin/temporal ## Sluice beside River on this Postgres, then the plugin through Temporal, then the gate's latency (BENCH_FLAGS=-short for a few minutes)
	cd bench && $(WITH_PG) $(GO) run . -out $(BIN)/bench $(BENCH_FLAGS)
	SLUICE_TEMPORAL_CLI=$(BIN)/temporal $(WITH_PG) $(GO) test -run '^$$' -bench 'Plugin_' -benchtime 1x -count 1 -timeout 60m ./interceptor/ | tee $(BIN)/bench/temporal.txt
	$(MAKE) --no-print-directory bench-gate

# The gate's added latency per call from TypeScript: gate's BenchmarkGate_TypeScriptLatency (its
# comment says what is measured); the table goes to bin/bench/gate.txt too. BENCH_FLAGS=-short: 20 calls, once.
bench-gate: bin/temporal ts-client ## The gate's latency per call from TypeScript: p50/p99 of acquire+release beside a bare call (a few minutes)
	@mkdir -p $(BIN)/bench
	bash -o pipefail -c "SLUICE_TEMPORAL_CLI=$(BIN)/temporal $(WITH_PG) $(GO) test -run '^$$' -bench 'Gate_TypeScriptLatency' -benchtime 1x -count 1 \
		-timeout 30m $(BENCH_FLAGS) ./gate/ | grep -v 'level=INFO' | tee $(BIN)/bench/gate.txt"

bench-go: bin/temporal ## Run the Go benchmarks of the library's packages (BENCH=regexp, BENCH_COUNT=5, BENCHTIME=2s)
	SLUICE_TEMPORAL_CLI=$(BIN)/temporal $(WITH_PG) $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) -count $(BENCH_COUNT) ./...

lint: api-check ## go vet, gofmt check, the API check, and staticcheck if it is on PATH
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	@files="$$($(GOFMT) -l $(GO_DIRS))" || exit 1; \
	if [ -n "$$files" ]; then \
		echo "gofmt: these files are not formatted (run 'make fmt'):"; \
		echo "$$files"; \
		exit 1; \
	fi
	@if command -v staticcheck >/dev/null 2>&1; then \
		echo "staticcheck ./..."; staticcheck ./...; \
	else \
		echo "lint: staticcheck not on PATH; skipping it"; \
	fi

# API_BASE=<ref> compares with another ref than the last release (scripts/last-release.sh).
api-check: ## The public Go API against the last release's (apidiff); incompatible changes must be in api/incompatible.txt
	scripts/api-check.sh

# DEMO_FLAGS go to the demo: -scenario fanout, -short, -json, -modes sluice (see samples/llm).
DEMO_FLAGS ?=

# The samples take TEMPORAL_ADDRESS and DATABASE_URL as a user's program would; internal/testkit/demoenv
# starts a dev server for them (unless TEMPORAL_ADDRESS is set) and passes on with-postgres.sh's URL.
DEMOENV := SLUICE_TEMPORAL_CLI=$(BIN)/temporal $(WITH_PG) $(BIN)/demoenv

demo: bin/temporal ## The LLM demo: a backfill and an assistant share one quota, three ways; writes bin/demo/report.html
	@echo "make demo: building the demo (the first build compiles the Temporal SDK: a minute or two)"
	$(GO) build -o $(BIN)/demo-llm ./samples/llm
	$(GO) build -o $(BIN)/demoenv ./internal/testkit/demoenv
	@echo "make demo: running it against Postgres and a Temporal dev server: three modes, a minute or more each"
	@$(DEMOENV) --dynamic-config-value matching.enableFairness=true -- $(BIN)/demo-llm -report $(BIN)/demo/report.html $(DEMO_FLAGS)

# EXPLAIN_FLAGS go to the demo beside explain-accuracy's own: -short, -scenario fanout (see samples/llm).
# EXPLAIN_DEMO=0 skips the demo: the calibration report alone, which needs no Temporal.
EXPLAIN_FLAGS ?=
EXPLAIN_DEMO  ?= 1

explain-accuracy: ## The wait estimate's calibration report (simulated clock, real engine: bin/explain/calibration.txt), then the demo's sampling (skip: EXPLAIN_DEMO=0)
	@mkdir -p $(BIN)/explain
	@# The figures depend on how busy the machine is: its load averages go beside them.
	@echo "load before: $$(uptime | sed 's/.*load average/load average/')"
	@CALIBRATE=$(BIN)/explain/calibration.txt $(WITH_PG) $(GO) test -count=1 -timeout 30m -run '^TestCalibration$$' ./internal/calibrate/ >$(BIN)/explain/calibration.log 2>&1 \
		|| { cat $(BIN)/explain/calibration.log; exit 1; }
	@cat $(BIN)/explain/calibration.txt
	@echo "load after: $$(uptime | sed 's/.*load average/load average/')"
	@if [ "$(EXPLAIN_DEMO)" != "0" ]; then $(MAKE) --no-print-directory explain-demo; fi

explain-demo: bin/temporal ## The demo's sluice mode, each sampled explanation's estimate against the real admission; writes bin/explain/
	@$(GO) build -o $(BIN)/demo-llm ./samples/llm
	@$(GO) build -o $(BIN)/demoenv ./internal/testkit/demoenv
	@mkdir -p $(BIN)/explain
	@echo "load before: $$(uptime | sed 's/.*load average/load average/')"
	@$(DEMOENV) --dynamic-config-value matching.enableFairness=true -- $(BIN)/demo-llm -modes sluice \
		-report $(BIN)/explain/report.html -explain-sample $(BIN)/explain/samples.jsonl $(EXPLAIN_FLAGS)
	@echo "load after: $$(uptime | sed 's/.*load average/load average/')"

demo-anthropic: bin/temporal ## Anthropic's input and output budgets: sluice vs a limit without an output budget (DEMO_FLAGS="-modes sluice,input-only,none")
	@$(GO) build -o $(BIN)/demo-anthropic ./samples/anthropic
	@$(GO) build -o $(BIN)/demoenv ./internal/testkit/demoenv
	@$(DEMOENV) -- $(BIN)/demo-anthropic $(DEMO_FLAGS)

demo-typescript: bin/temporal ts-sample ## A TypeScript workflow fans out LLM calls through a gate (withSluice): 0 429s, the quota used (DEMO_FLAGS=-short)
	@$(GO) build -o $(BIN)/demo-llm ./samples/llm
	@$(GO) build -o $(BIN)/demoenv ./internal/testkit/demoenv
	@$(DEMOENV) -- $(BIN)/demo-llm -scenario typescript $(DEMO_FLAGS)

tidy: ## go mod tidy
	$(GO) mod tidy

fmt: ## gofmt -w every Go file
	$(GOFMT) -l -w $(GO_DIRS)

clean: ## Remove bin/ (built tools)
	rm -rf $(BIN)
