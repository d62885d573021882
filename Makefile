# SPDX-License-Identifier: Apache-2.0
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
# A count, not a duration: with a duration, Go's fuzz coordinator (before Go 1.27) can
# fail a target with "context deadline exceeded" as the time runs out under load
# (go.dev/issue/75804). A duration (FUZZTIME=1m) still works.
FUZZTIME ?= 300000x
# The architectures the images hold; arm64 is the NR1 node's.
ARCHES := amd64 arm64
IMAGES := _output/images
# The agent image's budget per platform, compressed as containerd counts it.
AGENT_IMAGE_MAX := 20MiB
IMAGE_TAG ?= dev
STACK := deploy/local/stack.sh
export NR1_CACHE := $(CACHE)
export NR1_BIN := $(CURDIR)/bin
export NR1_IMAGES := $(CURDIR)/$(IMAGES)

# The Debian packages of the tests (promtool; Alertmanager for make e2e), of make
# generate (clang, llvm, libbpf-dev) and of make test-arm64 (qemu-user). The local node
# stack's own are installed by deploy/local/build.sh.
TEST_DEB_DEPS := prometheus prometheus-alertmanager
DEB_DEPS := clang llvm libbpf-dev qemu-user $(TEST_DEB_DEPS)
APT_INSTALL := deploy/local/apt-install.sh
# make run: the agent's mode (devicePlugin or dra), and whether to follow its log after
# the example output (FOLLOW=0: print its last lines and return).
MODE ?= devicePlugin
FOLLOW ?= 1
# make trust: the seed to replay (empty: a fresh one, printed), how long both modes run,
# and which run (MODES=devicePlugin or dra: that half of the plan only).
SEED ?=
DURATION ?= 10m
MODES ?=

.PHONY: help build $(ARCHES:%=build-%) dist test test-deps test-arm64 trust trust-regressions trust-soak fuzz bench bench-agent bench-ceiling lint generate generate-check deps run up down e2e image tools clean

help: ## list the targets
	@grep -E '^[a-z0-9 -]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

BINARIES := ./cmd/... ./deploy/local/pause ./deploy/local/ociimage

build: ## build the binaries for this machine into bin/
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ $(BINARIES)

build-amd64 build-arm64: build-%: ## cross-build the binaries for linux/amd64 or linux/arm64 into bin/linux_<arch>/
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/linux_$*/ $(BINARIES)

# licenses,ARCH,FILES: ociimage's --file for each license text an image carries at its path.
licenses = $(foreach f,$(2),--file $(1)=$(f):/$(f))

image: build $(ARCHES:%=build-%) ## build the nr1-agent, nr1-load and pause images offline, each one OCI archive for amd64 and arm64 (_output/images)
	@mkdir -p $(IMAGES)
	bin/ociimage --target nr1-agent --name nr1.local/nr1-agent:$(IMAGE_TAG) $(foreach a,$(ARCHES),--file $(a)=bin/linux_$(a)/nr1-agent:/nr1-agent $(call licenses,$(a),LICENSE LICENSES/GPL-2.0-only.txt LICENSES/BSD-2-Clause.txt)) --max-compressed $(AGENT_IMAGE_MAX) --out $(IMAGES)/nr1-agent.tar
	bin/ociimage --target nr1-load --name nr1.local/nr1-load:$(IMAGE_TAG) $(foreach a,$(ARCHES),--file $(a)=bin/linux_$(a)/nr1-load:/nr1-load $(call licenses,$(a),LICENSE)) --out $(IMAGES)/nr1-load.tar
	bin/ociimage --entrypoint /pause --name nr1.local/pause:1 $(foreach a,$(ARCHES),--file $(a)=bin/linux_$(a)/pause:/pause) --out $(IMAGES)/pause.tar

dist: $(ARCHES:%=build-%) ## the kubectl plugin's release archives, one per architecture, with their checksums (_output/dist)
	@mkdir -p _output/dist
	for a in $(ARCHES); do \
		tar -czf _output/dist/kubectl-nr1_$(VERSION)_linux_$$a.tar.gz --owner 0 --group 0 --mtime @0 --sort=name LICENSE -C bin/linux_$$a kubectl-nr1; \
	done
	cd _output/dist && sha256sum kubectl-nr1_$(VERSION)_linux_*.tar.gz > kubectl-nr1_$(VERSION)_SHA256SUMS && cat kubectl-nr1_$(VERSION)_SHA256SUMS

up: image ## bring up the local node stack with the simulated NR1 (root)
	$(STACK) up

down: ## tear the local node stack down
	$(STACK) down

run: image ## bring up the local cluster with the simulated NR1, deploy the agent in MODE (devicePlugin, dra) and that mode's example CGs, show them, follow the agent's log (FOLLOW=0: do not)
	NR1_MODE=$(MODE) NR1_FOLLOW=$(FOLLOW) deploy/local/run.sh

e2e: test-deps image ## end-to-end tests on the local cluster (brought up and torn down)
	deploy/local/e2e.sh

trust: test-deps image ## the generative trust suite on the local cluster: invented CGs and faults judged by their oracle, both modes, for DURATION (10m), from SEED (fresh unless given)
	NR1_TRUST_SEED=$(SEED) NR1_TRUST_DURATION=$(DURATION) NR1_TRUST_MODES=$(MODES) deploy/local/e2e.sh trust

trust-regressions: ## replay every seed kept in deploy/trust/testdata/seeds
	grep -v '^#' deploy/trust/testdata/seeds | while read -r seed duration _; do $(MAKE) trust SEED=$$seed DURATION=$$duration || exit 1; done

trust-soak: ## the trust suite for hours (DURATION=4h unless given)
	$(MAKE) trust DURATION=$(if $(filter command line,$(origin DURATION)),$(DURATION),4h) SEED=$(SEED)

test: test-deps ## run the tests, installing the Debian packages they need (root; privileged tests need it too)
	$(GO) test -race -count=1 ./...

test-arm64: ## run the tests built for arm64 under qemu-user (root: registers a binfmt_misc handler for the run)
	GO=$(GO) deploy/ci/test-arm64.sh

fuzz: ## run every fuzz target for FUZZTIME each (default 300000 inputs); crashers land in the package's testdata/fuzz
	GO=$(GO) FUZZTIME=$(FUZZTIME) deploy/ci/fuzz.sh

bench: $(TOOLS)/benchstat ## run the benchmarks and print medians
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./... | tee bench.out
	$(TOOLS)/benchstat bench.out

bench-ceiling: image ## the largest booking whose pod gets a status in device-plugin mode, with the kubelet's resource health on and off (stack brought up if not running; left up, resource health off)
	@mkdir -p _output/bench
	$(STACK) status | grep -q '^kubelet: running' || { $(STACK) up && $(STACK) deploy; }
	eval "$$($(STACK) env)" && $(GO) test -tags e2e -run '^$$' -bench 'BenchmarkStatusCeiling' -benchtime 1x -timeout 30m -v ./deploy/e2e/ | tee _output/bench/ceiling.out

bench-agent: image ## the node's NR1 bill on the local stack: the agent's CPU and memory, and the kubelet's, API server's and etcd's CPU above a baseline of 100 pods booking nothing, with 100 CGs booking a little or the whole node in each mode; detection latency over 50 trials, scheduling of 50 CGs per mode (stack brought up if not running; left up)
	@mkdir -p _output/bench
	$(STACK) status | grep -q '^kubelet: running' || { $(STACK) up && $(STACK) deploy; }
	eval "$$($(STACK) env)" && NR1_COST_PROFILE=$(CURDIR)/_output/bench/agent-cpu.pprof \
		$(GO) test -tags e2e -run '^$$' -bench 'BenchmarkAgentCost|BenchmarkDetectionLatency|BenchmarkSchedulingLatency' -benchtime 5x -timeout 90m -v ./deploy/e2e/ | tee _output/bench/agent.out
	for p in _output/bench/agent-cpu-*.pprof; do echo "== $$p"; $(GO) tool pprof -top -nodecount 30 $$p 2>/dev/null | head -40; done

lint: $(TOOLS)/golangci-lint ## gofmt, go vet (for each of ARCHES) and golangci-lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(foreach a,$(ARCHES),GOARCH=$(a) $(GO) vet ./... &&) true
	$(TOOLS)/golangci-lint run ./...

generate: ## regenerate generated code (bpf2go with clang) and the Grafana dashboard
	$(GO) generate ./...

generate-check: generate ## fail when committed generated code is stale
	@git diff --exit-code --stat -- bpf/ deploy/helm/nr1-agent/files/nr1-agent.json || { echo "generated code is stale: run make generate and commit"; exit 1; }

deps: ## install the Debian packages make generate, the tests and make test-arm64 need (as root)
	@$(APT_INSTALL) $(DEB_DEPS)

test-deps: ## install the Debian packages the tests need (as root)
	@$(APT_INSTALL) $(TEST_DEB_DEPS)

tools: $(TOOLS)/golangci-lint $(TOOLS)/benchstat ## install the pinned tools

$(TOOLS)/golangci-lint:
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(TOOLS)/benchstat:
	GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

clean: ## remove build outputs
	rm -rf bin bench.out _output
