# SPDX-License-Identifier: Apache-2.0
# nr1-agent. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
CACHE ?= $(HOME)/.cache/nr1-agent
TOOLS := $(CACHE)/tools
GOLANGCI_LINT_VERSION := v2.15.0
BENCHSTAT_VERSION := v0.0.0-20260908200009-22c9c6c9d4da
# The version built and released: v$(cat VERSION) at its tag, else a semver pre-release
# of it naming the commit (deploy/dist/version.sh); worked out once.
VERSION ?= $(shell deploy/dist/version.sh)
VERSION := $(VERSION)
KREW_VERSION := v0.4.3
LDFLAGS := -s -w -X main.version=$(VERSION)
BENCH_COUNT ?= 6
# A count, not a duration: with a duration, Go's fuzz coordinator (before Go 1.27) can
# fail a target with "context deadline exceeded" as the time runs out under load
# (go.dev/issue/75804). A duration (FUZZTIME=1m) still works.
FUZZTIME ?= 300000x
# The architectures the images hold; arm64 is the NR1 node's.
ARCHES := amd64 arm64
# The platforms of kubectl nr1's release: the nodes' and the operators' machines.
DIST_PLATFORMS := linux_amd64 linux_arm64 darwin_amd64 darwin_arm64
DIST := _output/dist
KREW := $(TOOLS)/krew-$(KREW_VERSION)
CYCLONEDX_VERSION := v1.10.0
CYCLONEDX := $(TOOLS)/cyclonedx-gomod-$(CYCLONEDX_VERSION)/cyclonedx-gomod
# sbom,MAIN,OS_ARCH,OUT: the CycloneDX SBOM of a binary, from the Go module graph as that
# platform builds it (its build constraints select the modules), with their licenses;
# no serial number or timestamp, so that a second make dist writes the same bytes.
sbom = CGO_ENABLED=0 GOOS=$(firstword $(subst _, ,$(2))) GOARCH=$(lastword $(subst _, ,$(2))) \
	$(CYCLONEDX) app -json -licenses -std -noserial -notimestamp -main $(1) -output $(3) .
# The images' platforms, for their SBOMs.
IMAGE_PLATFORMS := $(ARCHES:%=linux_%)
IMAGES := _output/images
# The agent image's budget per platform, compressed as containerd counts it.
AGENT_IMAGE_MAX := 20MiB
IMAGE_TAG ?= dev
# make release: the OCI registry (host[:port][/path]) to push to, and the CA to trust it
# by where the machine's roots do not.
REGISTRY ?=
REGISTRY_CA ?=
# (A dry run, make -n, only shows the commands.)
ifneq ($(filter release,$(MAKECMDGOALS)),)
ifeq ($(REGISTRY)$(findstring n,$(firstword -$(MAKEFLAGS))),)
$(error make release REGISTRY=<host[:port][/path]> [REGISTRY_CA=<ca.crt>]: the registry to push to)
endif
endif
STACK := deploy/local/stack.sh
export NR1_CACHE := $(CACHE)
export NR1_BIN := $(CURDIR)/bin
export NR1_IMAGES := $(CURDIR)/$(IMAGES)

# The Debian packages of the tests (promtool; Alertmanager for make e2e; clang, llvm and
# libbpf-dev, which make generate uses too, for the mutant whose BPF C make test builds),
# and of make test-arm64 (qemu-user). The local node stack's own are installed by
# deploy/local/build.sh.
TEST_DEB_DEPS := clang llvm libbpf-dev prometheus prometheus-alertmanager yamllint
DEB_DEPS := qemu-user reuse $(TEST_DEB_DEPS)
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

.PHONY: help version build $(ARCHES:%=build-%) dist dist-check release test test-deps test-arm64 test-kernels trust trust-regressions trust-mutants trust-mutants-gate trust-soak fuzz bench bench-agent bench-gate bench-ceiling lint generate generate-check deps run up down e2e e2e-crio image tools clean

help: ## list the targets
	@grep -E '^[a-z0-9 -]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

version: ## print the version the binaries and archives are built as (VERSION)
	@echo $(VERSION)

BINARIES := ./cmd/... ./deploy/local/pause ./deploy/local/ociimage
# The revision nr1_build_info says is the one the toolchain stamps from the checkout:
# stamped whatever GOFLAGS the machine's go env sets (-buildvcs=auto: not outside one).
BUILDVCS := -buildvcs=auto

build: ## build the binaries for this machine into bin/
	CGO_ENABLED=0 $(GO) build -trimpath $(BUILDVCS) -ldflags '$(LDFLAGS)' -o bin/ $(BINARIES)

# The 32-bit sibling of each architecture, for nr1-load32: a CG whose system calls
# enter the kernel through its compat entries.
COMPAT_amd64 := GOARCH=386
COMPAT_arm64 := GOARCH=arm GOARM=7

build-amd64 build-arm64: build-%: ## cross-build the binaries for linux/amd64 or linux/arm64 into bin/linux_<arch>/, and nr1-load for its 32-bit sibling (nr1-load32)
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath $(BUILDVCS) -ldflags '$(LDFLAGS)' -o bin/linux_$*/ $(BINARIES)
	CGO_ENABLED=0 GOOS=linux $(COMPAT_$*) $(GO) build -trimpath $(BUILDVCS) -ldflags '$(LDFLAGS)' -o bin/linux_$*/nr1-load32 ./cmd/nr1-load

# The images' version and revision, which their labels and annotations carry.
IMAGE_ARGS = --build-arg VERSION=$(VERSION) --build-arg REVISION=$(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# licenses,ARCH,FILES: ociimage's --file for each license text an image carries at its path.
licenses = $(foreach f,$(2),--file $(1)=$(f):/$(f))

image: build $(ARCHES:%=build-%) ## build the nr1-agent, nr1-load (with nr1-load32) and pause images offline, each one OCI archive for amd64 and arm64 (_output/images)
	@mkdir -p $(IMAGES)
	bin/ociimage --target nr1-agent --name nr1.local/nr1-agent:$(IMAGE_TAG) $(IMAGE_ARGS) $(foreach a,$(ARCHES),--file $(a)=bin/linux_$(a)/nr1-agent:/nr1-agent $(call licenses,$(a),LICENSE LICENSES/GPL-2.0-only.txt LICENSES/BSD-2-Clause.txt)) --max-compressed $(AGENT_IMAGE_MAX) --out $(IMAGES)/nr1-agent.tar
	bin/ociimage --target nr1-load --name nr1.local/nr1-load:$(IMAGE_TAG) $(IMAGE_ARGS) $(foreach a,$(ARCHES),--file $(a)=bin/linux_$(a)/nr1-load:/nr1-load --file $(a)=bin/linux_$(a)/nr1-load32:/nr1-load32 $(call licenses,$(a),LICENSE)) --out $(IMAGES)/nr1-load.tar
	bin/ociimage --entrypoint /pause --name nr1.local/pause:1 $(foreach a,$(ARCHES),--file $(a)=bin/linux_$(a)/pause:/pause) --out $(IMAGES)/pause.tar

# dist: each platform's plugin built, with the license and the completion helper, into
# one archive of fixed owner, modes, times and order, so that a release rebuilt is the
# same bytes; then the sums and the krew manifest, which reads the archives back.
dist: $(CYCLONEDX) ## the release files: the kubectl plugin's archive per platform (linux, darwin; amd64, arm64), their SHA256SUMS, the krew manifest nr1.yaml, and a CycloneDX SBOM of each archive's and each image's binary per platform (_output/dist)
	rm -rf $(DIST)
	set -euo pipefail; for p in $(DIST_PLATFORMS); do \
		d=$(DIST)/.stage/$$p; mkdir -p $$d; \
		CGO_ENABLED=0 GOOS=$${p%_*} GOARCH=$${p#*_} $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$d/kubectl-nr1 ./cmd/kubectl-nr1; \
		chmod 0755 $$d/kubectl-nr1; \
		install -m 0644 LICENSE $$d/LICENSE; \
		install -m 0755 cmd/kubectl-nr1/kubectl_complete-nr1 $$d/kubectl_complete-nr1; \
		tar -c --owner 0 --group 0 --numeric-owner --mtime @0 --sort=name -C $$d LICENSE kubectl-nr1 kubectl_complete-nr1 \
			| gzip -9n > $(DIST)/kubectl-nr1_$(VERSION)_$$p.tar.gz; \
	done
	rm -rf $(DIST)/.stage
	cd $(DIST) && sha256sum kubectl-nr1_$(VERSION)_*.tar.gz > kubectl-nr1_$(VERSION)_SHA256SUMS && cat kubectl-nr1_$(VERSION)_SHA256SUMS
	$(GO) run ./deploy/dist/krew -version $(VERSION) -out $(DIST)/nr1.yaml $(foreach p,$(DIST_PLATFORMS),$(DIST)/kubectl-nr1_$(VERSION)_$(p).tar.gz)
	mkdir -p $(DIST)/sbom
	$(foreach p,$(DIST_PLATFORMS),$(call sbom,cmd/kubectl-nr1,$(p),$(DIST)/sbom/kubectl-nr1_$(VERSION)_$(p).cdx.json) &&) true
	$(foreach i,nr1-agent nr1-load,$(foreach p,$(IMAGE_PLATFORMS),$(call sbom,cmd/$(i),$(p),$(DIST)/sbom/$(i)_$(VERSION)_$(p).cdx.json) &&)) true

release: image ## push the agent's image (amd64, arm64) as REGISTRY/nr1-agent:VERSION and the chart as oci://REGISTRY/charts/nr1-agent (its image that one); REGISTRY_CA names the registry's CA where the machine does not trust it
	deploy/local/build.sh release
	PATH=$(CACHE)/path:$$PATH REGISTRY_CA=$(REGISTRY_CA) deploy/dist/release.sh $(REGISTRY) $(VERSION)

dist-check: dist $(KREW)/krew ## make dist, checked as krew and kubectl use it: the manifest by krew's validator, every archive's files, each installed by krew (offline), this machine's run; a second make dist the same bytes
	KREW=$(KREW) DIST=$(DIST) VERSION=$(VERSION) deploy/dist/check.sh

up: image ## bring up the local node stack with the simulated NR1 (root)
	$(STACK) up

down: ## tear the local node stack down
	$(STACK) down

run: image ## bring up the local cluster with the simulated NR1, deploy the agent in MODE (devicePlugin, dra) and that mode's example CGs, show them, follow the agent's log (FOLLOW=0: do not)
	NR1_MODE=$(MODE) NR1_FOLLOW=$(FOLLOW) deploy/local/run.sh

e2e: test-deps image ## end-to-end tests on the local cluster (brought up and torn down; NR1_RUNTIME=crio: on CRI-O)
	deploy/local/e2e.sh

# The e2e tests CI runs on CRI-O besides every test on containerd: a CG measured with its
# budget in either mode, the actions, a kubelet and a runtime restart doing nothing to CGs
# at their budget, a killed CG ending as a failure, the install from a registry, the budget
# gate in either mode.
E2E_CRIO := TestKilledCGEndsAsAFailure|TestPrevention|TestNodeAdvertisesNR1Capacity|TestResNetCGIsScheduledAdmittedAndGetsItsBudget|TestAgentKnowsTheResNetCG|TestKubeletRestartReregisters|TestEnforcement|TestFootprintFollowsTheWorkload|TestDRA|TestNoFalseAction

e2e-crio: test-deps image ## the end-to-end tests of a CG's life on a CRI-O node (NR1_RUNTIME=crio make e2e runs them all)
	NR1_RUNTIME=crio NR1_E2E_RUN='^($(E2E_CRIO))$$' deploy/local/e2e.sh

trust: test-deps image ## the generative trust suite on the local cluster: invented CGs and faults judged by their oracle, both modes, for DURATION (10m), from SEED (fresh unless given)
	NR1_TRUST_SEED=$(SEED) NR1_TRUST_DURATION=$(DURATION) NR1_TRUST_MODES=$(MODES) deploy/local/e2e.sh trust

trust-regressions: ## replay every seed kept in deploy/trust/testdata/seeds
	grep -v '^#' deploy/trust/testdata/seeds | while read -r seed duration _; do $(MAKE) trust SEED=$$seed DURATION=$$duration || exit 1; done

trust-mutants: test-deps image ## the trust suite against agents broken on purpose (kill or throttle disabled, own uncertainty trusted, allocation read as zero, usage halved): each must fail, and what caught it is printed
	cd $(CURDIR) && deploy/trust/mutants.sh

trust-mutants-gate: test-deps image ## the same with the budget gate on, against the gate's mutants (each CG held to twice its booking)
	cd $(CURDIR) && NR1_MUTANT_JUDGE=gate deploy/trust/mutants.sh

trust-soak: ## the trust suite for hours (DURATION=4h unless given)
	$(MAKE) trust DURATION=$(if $(filter command line,$(origin DURATION)),$(DURATION),4h) SEED=$(SEED)

test: test-deps ## run the tests, installing the Debian packages they need (root; privileged tests need it too)
	$(GO) test -race -count=1 ./...

test-arm64: ## run the tests built for arm64 under qemu-user (root: registers a binfmt_misc handler for the run)
	GO=$(GO) deploy/ci/test-arm64.sh

test-kernels: ## run the privileged tests (PKGS, default ./bpf; RUN, a -test.run regex) on a Debian kernel (ARCH amd64 or arm64, default amd64; SUITE, default bookworm: 6.1) in a qemu guest
	ARCH=$(or $(ARCH),amd64) deploy/kernels/run.sh -run '$(or $(RUN),.)' $(or $(PKGS),./bpf)

fuzz: ## run every fuzz target for FUZZTIME each (default 300000 inputs); crashers land in the package's testdata/fuzz
	GO=$(GO) FUZZTIME=$(FUZZTIME) deploy/ci/fuzz.sh

bench: $(TOOLS)/benchstat ## run the benchmarks and print medians
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./... | tee bench.out
	$(TOOLS)/benchstat bench.out

bench-gate: $(TOOLS)/benchstat ## the budget gate's cost: an open and close of a regular file, of /dev/null and of a queue, in a pod and on the host, with no BPF, the footprint's tracepoints, and the gate (linking by registers, and by entry tracepoints); an open refused past a booking, against the descriptions charged; every syscall's price of following 32-bit opens at their exit (as root)
	@mkdir -p _output/bench
	@# Rounds of every case once, not each case BENCH_COUNT times in a row: a machine
	@# whose speed drifts then weighs on every case alike.
	$(GO) test -c -o _output/bench/bpf.test ./bpf/
	cd bpf && for i in $$(seq $(BENCH_COUNT)); do ../_output/bench/bpf.test -test.run '^$$' -test.bench BenchmarkGate -test.count 1; done | tee ../_output/bench/gate.out
	$(TOOLS)/benchstat -filter '-.name:GateCompatExit' -col /bpf _output/bench/gate.out
	$(TOOLS)/benchstat -filter '.name:GateCompatExit' -col /compat _output/bench/gate.out

bench-ceiling: image ## the largest booking whose pod gets a status in device-plugin mode, with the kubelet's resource health on and off (stack brought up if not running; left up, resource health off)
	@mkdir -p _output/bench
	$(STACK) status | grep -q '^kubelet: running' || { $(STACK) up && $(STACK) deploy; }
	eval "$$($(STACK) env)" && $(GO) test -tags e2e -run '^$$' -bench 'BenchmarkStatusCeiling' -benchtime 1x -timeout 30m -v ./deploy/e2e/ | tee _output/bench/ceiling.out

bench-agent: image ## the node's NR1 bill on the local stack: the agent's CPU and memory, and the kubelet's, API server's and etcd's CPU above a baseline of 100 pods booking nothing, with 100 CGs booking a little or the whole node in each mode; detection latency over 200 trials, scheduling of 50 CGs per mode (stack brought up if not running; left up)
	@mkdir -p _output/bench
	$(STACK) status | grep -q '^kubelet: running' || { $(STACK) up && $(STACK) deploy; }
	eval "$$($(STACK) env)" && NR1_COST_PROFILE=$(CURDIR)/_output/bench/agent-cpu.pprof \
		$(GO) test -tags e2e -run '^$$' -bench 'BenchmarkAgentCost|BenchmarkSchedulingLatency' -benchtime 5x -timeout 90m -v ./deploy/e2e/ | tee _output/bench/agent.out
	eval "$$($(STACK) env)" && $(GO) test -tags e2e -run '^$$' -bench 'BenchmarkDetectionLatency' -benchtime 20x -timeout 90m -v ./deploy/e2e/ | tee -a _output/bench/agent.out
	for p in _output/bench/agent-cpu-*.pprof; do echo "== $$p"; $(GO) tool pprof -top -nodecount 30 $$p 2>/dev/null | head -40; done

lint: $(TOOLS)/golangci-lint ## gofmt, go vet (for each of ARCHES), golangci-lint and reuse lint (every file's licence and copyright: its SPDX line or .reuse/dep5)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(foreach a,$(ARCHES),GOARCH=$(a) $(GO) vet ./... &&) true
	$(TOOLS)/golangci-lint run ./...
	@command -v reuse >/dev/null || { echo "no reuse: make deps installs it" >&2; exit 1; }
	reuse lint --quiet || reuse lint

generate: ## regenerate generated code (bpf2go with clang) and the Grafana dashboard
	$(GO) generate ./...

generate-check: generate ## fail when committed generated code is stale
	@git diff --exit-code --stat -- bpf/ deploy/helm/nr1-agent/files/nr1-agent.json || { echo "generated code is stale: run make generate and commit"; exit 1; }

deps: ## install the Debian packages make generate, the tests and make test-arm64 need (as root)
	@$(APT_INSTALL) $(DEB_DEPS)

test-deps: ## install the Debian packages the tests need (as root)
	@$(APT_INSTALL) $(TEST_DEB_DEPS)

tools: $(TOOLS)/golangci-lint $(TOOLS)/benchstat $(KREW)/krew $(CYCLONEDX) ## install the pinned tools

$(CYCLONEDX):
	GOBIN=$(dir $@) $(GO) install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$(CYCLONEDX_VERSION)

# krew and its manifest validator, from the Go module proxy (make dist-check).
$(KREW)/krew:
	GOBIN=$(KREW) $(GO) install sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION) sigs.k8s.io/krew/cmd/validate-krew-manifest@$(KREW_VERSION)

$(TOOLS)/golangci-lint:
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(TOOLS)/benchstat:
	GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

clean: ## remove build outputs
	rm -rf bin bench.out _output
