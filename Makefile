# Kairos build and test targets. `make help` lists them.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)

GO      ?= go
LDFLAGS := -X main.version=$(VERSION) -X main.buildCommit=$(COMMIT) -X main.buildDate=$(DATE)
# The CLI is built only once its package has Go files.
CLIENT_CMD := $(wildcard client/cmd/kairos/*.go)

.PHONY: bench-check bench-cluster bench-lmstfy bench-peers peers-check build run test test-short lint cover bench chaos soak clean help

## build: bin/kairos-server (and bin/kairos, the CLI, when it exists)
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/kairos-server ./server/cmd/kairos-server
ifneq ($(CLIENT_CMD),)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/kairos ./client/cmd/kairos
endif

## run: start kairos-server with config/dev.toml (embedded in-memory Redis)
run:
	$(GO) run -ldflags "$(LDFLAGS)" ./server/cmd/kairos-server -c config/dev.toml

# Where the dashboard's browser tests (server/app TestDashboardBrowser) write their screenshots.
SCREENSHOTS ?= $(CURDIR)/bin/dashboard-screenshots

# The packages whose tests take longest (server/app's end-to-end and browser
# tests about 5 minutes on 2 cores, engine/rdb about 3), named before ./...:
# go test runs -p (the number of cores) packages at a time, giving the first
# named the first free slot, so these overlap the many short ones instead of
# starting late and ending the run alone. go test runs each package once.
SLOW_TESTS := ./server/app ./engine/rdb ./server ./scripts/chaos

## test: every package with -race and the real-Redis tier (installs redis-server if missing; builds lmstfy v1.0.16 once for the import tests) and the dashboard's browser tests (installs chromium and the npm packages if missing), the event loops' tests again without -race (their raw system calls), the Go client's allocations per call (without -race, which allocates), the fuzz targets briefly
test:
	scripts/install-redis.sh
	scripts/install-chromium.sh
	scripts/build-lmstfy.sh >/dev/null || echo "lmstfy was not built: the lmstfy import tests skip (they fail with CI=true or REQUIRE_LMSTFY=1)"
	rm -rf $(SCREENSHOTS)
	KAIROS_SCREENSHOTS=$(SCREENSHOTS) $(GO) test -race -count=1 -timeout 9m $(SLOW_TESTS) ./...
	@echo "dashboard screenshots: $(SCREENSHOTS)"
	$(GO) test -count=1 -run Loop ./server
	$(GO) test -count=1 -run HotCallAllocs ./client
	FUZZTIME=2s scripts/fuzz.sh
	$(MAKE) peers-check

## peers-check: compile, vet and unit-test the bench-peers harness (its own module, scripts/peers) and check the BullMQ driver's syntax and locked packages, without running any peer (part of test)
peers-check:
	cd scripts/peers && $(GO) vet ./... && $(GO) test -count=1 ./...
	scripts/install-node.sh
	node --check scripts/peers/bullmq/bench.js
	cd scripts/peers/bullmq && npm ci --no-audit --no-fund --loglevel=error && node bench.js --version

## test-short: every package without -race, in -short mode
test-short:
	$(GO) test -short -count=1 -timeout 9m ./...

## lint: gofmt must have nothing to say, go vet must pass (and staticcheck, when installed)
lint:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: these files need gofmt:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then echo staticcheck ./...; staticcheck ./...; fi

## cover: run the tests with coverage; writes coverage.out and coverage.html
cover:
	$(GO) test -count=1 -timeout 9m -coverprofile=coverage.out ./...
	$(GO) tool cover -html=coverage.out -o coverage.html
	$(GO) tool cover -func=coverage.out | tail -n 1

## bench: the engine benchmarks
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine/...

## chaos: the full chaos suite (doc/reliability.md): kills, flushes, pauses, failovers, Redis Cluster slot moves and master kills, consumer drops, a noisy neighbour, in-flight limits under kills; about 16 minutes. ARGS= passes more flags (ARGS='-scenario noisy' runs one)
chaos:
	scripts/install-redis.sh
	$(GO) run ./scripts/chaos -scenario all -duration 40s $(ARGS)

## soak: 4 minutes of steady load with queues nobody consumes; fails if Redis memory or keys grow (doc/reliability.md)
soak:
	scripts/install-redis.sh
	$(GO) run ./scripts/chaos -scenario soak -soak-duration 4m -soak-rate 2000

## bench-check: load-test a fresh server and fail on a throughput regression (not part of test)
bench-check:
	scripts/bench-check.sh

## bench-lmstfy: lmstfy (built from the Go module proxy) and Kairos side by side, each on a fresh Redis; ARGS= passes kairos bench arguments
bench-lmstfy:
	scripts/lmstfy-bench.sh $(ARGS)

## bench-peers: asynq, BullMQ and River beside Kairos, one at a time on fresh stores, 3 interleaved rounds; prints the table (doc/performance.md; ROUNDS=, JOBS=, PEERS=, SCENARIOS= in scripts/bench-peers.sh)
bench-peers:
	scripts/bench-peers.sh

## bench-cluster: Kairos on a throwaway 6-node Redis Cluster beside Kairos on a throwaway single Redis, same run: per-job CPU (server, Redis per master), throughput (ROUNDS=, DURATION=, SHARDS=K; doc/performance.md)
bench-cluster:
	scripts/cluster-bench.sh

## clean: remove build and coverage output
clean:
	rm -rf bin coverage.out coverage.html

## help: list the targets
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)
