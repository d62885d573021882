# nr1-agent. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
CACHE ?= $(HOME)/.cache/nr1-agent
TOOLS := $(CACHE)/tools
GOLANGCI_LINT_VERSION := v2.15.0
BENCHSTAT_VERSION := v0.0.0-20260908200009-22c9c6c9d4da
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BENCH_COUNT ?= 6

.PHONY: help build test bench lint generate run down e2e image tools clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build the binaries into bin/
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

test: ## run the tests (privileged tests need root)
	$(GO) test -race -count=1 ./...

bench: $(TOOLS)/benchstat ## run the benchmarks and print medians
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./... | tee bench.out
	$(TOOLS)/benchstat bench.out

lint: $(TOOLS)/golangci-lint ## gofmt, go vet and golangci-lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(TOOLS)/golangci-lint run ./...

generate: ## regenerate generated code
	$(GO) generate ./...

tools: $(TOOLS)/golangci-lint $(TOOLS)/benchstat ## install the pinned tools

$(TOOLS)/golangci-lint:
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(TOOLS)/benchstat:
	GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

clean: ## remove build outputs
	rm -rf bin bench.out
