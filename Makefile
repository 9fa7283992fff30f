# gantry — run `make help` for the targets.
GO       ?= go
PKGS     ?= ./...
BIN      ?= bin/gantry
IMAGE    ?= gantry:dev
# Tests get a generous timeout: the end-to-end sort tests start real processes.
TESTFLAGS ?= -timeout 20m
# Build flags of lint's compiles (vet, staticcheck). make test sets -race: lint then type-checks
# against the tests' own -race build instead of compiling every package a second time.
LINTFLAGS ?=

.DEFAULT_GOAL := help

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build bin/gantry
	$(GO) build -o $(BIN) ./cmd/gantry

demo: ## Sort 1 GB of generated data on a local cluster (1 master, 4 workers) and validate it
	bash scripts/demo.sh

bench-sort: ## Benchmark sort local against GNU sort on 1 GB (figures in docs/BENCHMARKS.md)
	bash scripts/bench-sort-local.sh

bench-sort-lines: ## Benchmark sort local --format lines against GNU sort with the same keys on 1 GB of text
	bash scripts/bench-sort-lines.sh

bench-dsort-limited: ## Larger than memory: 4 GB on 4 workers in 256 MiB containers (page cache included) against GNU sort under the job's limit, beside the disk's throughput (needs docker)
	bash scripts/bench-dsort-limited.sh

bench-dsort-s3: ## The distributed sort reading and writing S3: 2 GB as 64 objects on 4 workers, S3 to S3 against the same job on local files (a MinIO of its own on tmpfs)
	SPLIT=1 bash scripts/bench-dsort-s3.sh

bench-dsort-crash: ## What a crash costs the distributed sort: a worker, then the master, killed in each phase against clean runs (2 GB, 4 workers)
	bash scripts/bench-dsort-crash.sh

bench-dsort-lines: ## Benchmark a 4-worker sort of 2 GB of text lines (--format lines) against GNU sort with the same keys
	bash scripts/bench-dsort-lines.sh

bench-queue: ## Benchmark taskq against asynq (private Redis) and River (private Postgres database): tasks/s, ratios, enqueue→start p50/p99
	cd bench && $(GO) run ./cmd/queuebench $(QUEUEBENCHFLAGS)

bench-apps: ## Workspace apps and SSH on a real ws serve: app-URL and ssh latency cold/warm (p50/p99 of 200), 64 WebSocket echo streams at 1,000 msg/s (figures in docs/BENCHMARKS.md)
	cd bench && $(GO) run ./cmd/appbench $(APPBENCHFLAGS)

bench-ws-start: ## Workspace start latency on a real ws serve: create → RUNNING and create → exec, cold and warm (pool), process/Docker/Kubernetes (kwok), idle and under a bulk load (p50/p90/p99/max of 200)
	cd bench && $(GO) run ./cmd/startbench $(STARTBENCHFLAGS)

bench-dsort: ## End-to-end dsort (4 workers, 2 GB) and sort local (1 GB) vs GNU sort (figures in docs/BENCHMARKS.md)
	bash scripts/bench-dsort.sh

test: ## Install what the tests need, lint, run every test with -race (what CI runs; scripts/test.sh: the steps overlap, timed)
	GO='$(GO)' PKGS='$(PKGS)' TESTFLAGS='$(TESTFLAGS)' bash scripts/test.sh

services: ## Install/start what the tests need (scripts/services.sh; a no-op when present)
	bash scripts/services.sh

# The short tests wait (on engines, processes, backoffs) more than they compute: test twice as
# many packages at a time as there are cores.
SHORTP ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) * 2 )))

test-short: ## Run the tests without -race and without the slow end-to-end ones
	$(GO) test -short -p $(SHORTP) $(TESTFLAGS) $(PKGS)

test-race: ## Run every test with the race detector
	$(GO) test -race $(TESTFLAGS) $(PKGS)

bench: ## Run the Go benchmarks (figures and the full-size commands are in docs/BENCHMARKS.md)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

lint: ## gofmt check, go vet (every module, bench/ too), staticcheck, gocyclo <= 15 and codecheck (functions <= 80 lines, files <= 800 lines, package tours, test contexts and sleeps, the internal/ floor) on the module, generated code up to date
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to rewrite:"; echo "$$out"; exit 1; fi
	$(GO) vet $(LINTFLAGS) $(PKGS)
	@# The other modules (bench/: its own go.mod) build and vet too; -mod=readonly fails on a go.mod that lags.
	@for m in $$(git ls-files '*/go.mod'); do d=$$(dirname $$m); echo "cd $$d && $(GO) vet $(LINTFLAGS) -mod=readonly ./..."; \
		(cd $$d && $(GO) vet $(LINTFLAGS) -mod=readonly ./...) || { echo "lint: module $$d does not build or vet (go.mod stale? run go mod tidy in $$d)"; exit 1; }; done
	@# staticcheck reads the packages' export data through go list: with GOFLAGS=$(LINTFLAGS) the same
	@# compiles as vet's (the tool itself is built without them: go tool -n names it).
	GOFLAGS='$(LINTFLAGS)' $$($(GO) tool -n staticcheck) $(PKGS)
	@out=$$($(GO) tool gocyclo -over 15 -ignore '_test\.go$$|\.pb\.go$$' $$($(GO) list -f '{{.Dir}}' $(PKGS))); if [ -n "$$out" ]; then echo "gocyclo: over 15:"; echo "$$out"; exit 1; fi
	$(GO) run ./internal/tools/codecheck
	@if command -v protoc >/dev/null; then \
		tmp=$$(mktemp -d); cp dsort/dsortpb/*.pb.go "$$tmp"/; \
		$(GO) generate ./dsort/... || { rm -rf "$$tmp"; exit 1; }; \
		for f in "$$tmp"/*.pb.go; do cmp -s "$$f" dsort/dsortpb/$$(basename "$$f") || \
			{ echo "generated protobuf code was out of date (now regenerated: commit it)"; rm -rf "$$tmp"; exit 1; }; done; \
		rm -rf "$$tmp"; \
	else echo "lint: protoc not installed, generated-code check skipped (make services installs it)"; fi

image: ## Build the container image gantry:dev with the local Docker engine (FROM scratch, no registry; IMAGE=tag)
	bash scripts/image.sh --tag $(IMAGE)

plots: ## Draw docs/BENCHMARKS.md's charts (docs/plots/*.svg) from the recorded results in docs/results/*.csv
	cd bench && $(GO) run ./cmd/plots -results ../docs/results -out ../docs/plots

man: ## Write a man page per command into man/ (read one with: man -l man/gantry-ws-get.1)
	$(GO) run ./cmd/gantry/internal/mangen -dir man

generate: ## Regenerate protobuf/gRPC code (needs protoc: apt-get install protobuf-compiler)
	$(GO) generate ./dsort/...

clean: ## Remove build output
	rm -rf bin

.PHONY: help build image man plots demo bench-sort bench-sort-lines bench-dsort-lines bench-dsort-s3 bench-dsort-crash bench-dsort-limited bench-queue bench-apps bench-ws-start bench-dsort services test test-short test-race bench lint generate clean
