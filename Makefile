# daemonguard — run `make help` for the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

GO          ?= go
LOCALBIN    ?= $(CURDIR)/bin
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The image's binary gets the same stamp from .ko.yaml.
LDFLAGS     := -X github.com/daemonguard/daemonguard/internal/cli.Version=$(VERSION)
# make image/chart: REGISTRY (e.g. registry.example.com/team) to push to; BASE auto|local|<image>.
REGISTRY    ?=
BASE        ?= auto
RELEASE_DIR ?= $(LOCALBIN)/release
# go test flags. Integration packages start one local cluster each.
TEST_FLAGS  ?= -count=1 -timeout 60m
# TEST_PACKAGES is how many test packages make test runs at once. Three on a 2-core machine: a
# cluster package spends most of its time waiting on the control plane (a rollout's pods, the pod
# garbage collector's quarantine, Argo CD's sync), so a third keeps the cores busy
# (docs/performance.md, "The first run").
TEST_PACKAGES ?= 3
BENCH       ?= .

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: ## Build bin/daemonguard.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(LOCALBIN)/daemonguard ./cmd/daemonguard

.PHONY: fmt
fmt: ## Format Go code.
	$(GO) fmt ./...

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: vet ## Check formatting and vet (fails on unformatted files).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The pinned tools are built from tools/* into ~/.cache/daemonguard/bin by cmd/testbin, which
# imports only internal/toolbin: on a cold machine the build starts after seconds. The tool sets are
# named in internal/toolbin (sets.go); the demo builds only what it runs.
# cmd/testbin and cmd/localcluster compile the way the tools do (static, toolbin.CompileFlags): the
# standard library and the libraries they share with the control plane at the same versions (273
# of localcluster's 1,094 packages) are then compiled once on a new machine, not once per build.
STATIC_GO    := CGO_ENABLED=0 $(GO)
STATIC_FLAGS := -trimpath -gcflags=all=-dwarf=false
TESTBIN      := $(STATIC_GO) run $(STATIC_FLAGS) ./cmd/testbin
LOCALCLUSTER := $(STATIC_GO) run $(STATIC_FLAGS) ./cmd/localcluster
DEMO_TOOLS   := --set demo$(if $(filter 1 true yes,$(REAL_NODE)), --set real-node)

.PHONY: testbin
testbin: testdeps ## Build (or reuse cached) every pinned tool: the control plane, kwok, kubelet, kube-proxy, helm, ko, cert-manager, Argo CD and gotestsum.
	$(TESTBIN) --set all

.PHONY: demobin
demobin: ## Build (or reuse cached) what `make demo` and `make cluster` run: etcd, the control plane and kwok (REAL_NODE=1: also kubelet and kube-proxy).
	$(TESTBIN) $(DEMO_TOOLS)

# with-demo-tools runs `localcluster $(1)` once the demo's tools are built, compiling
# cmd/localcluster meanwhile: on a cold machine each takes minutes, and the compile fills the cores
# the tool build leaves idle while it waits on module downloads, links and its longest packages.
define with-demo-tools
	@test -x $(LOCALBIN)/localcluster || echo "First run: compiling the demo and the tool builder, then building the demo's tools (minutes on a new machine; progress follows)"
	@$(STATIC_GO) build $(STATIC_FLAGS) -o $(LOCALBIN)/localcluster ./cmd/localcluster & compile=$$!; \
	  $(TESTBIN) $(DEMO_TOOLS) || { wait $$compile; exit 1; }; wait $$compile
	$(LOCALBIN)/localcluster $(1)
endef

# Argo CD's application controller and repo server need a Redis; the e2e tests run Debian's
# redis-server on a free port and skip, naming the package, when it is missing. RUNLEVEL=1 keeps
# the package's init script from starting a system-wide redis on port 6379.
# The alert rules' promtool tests and test/promtest run Debian's prometheus package (it ships
# promtool); RUNLEVEL=1 keeps its service from starting a system-wide Prometheus on port 9090.
.PHONY: testdeps
testdeps: realnodedeps ## Install Debian's redis-server (Argo CD e2e tests), prometheus (alert rule and analysis gate tests) and the real node's packages when missing and root.
	@if ! command -v redis-server >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's redis-server for the Argo CD e2e tests"; \
	    apt-get update -qq && RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server; \
	  else \
	    echo "redis-server is missing and this is not root with apt-get: the Argo CD e2e tests will skip (install Debian's redis-server package)"; \
	  fi; \
	fi
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's prometheus (and promtool) for the alert rule and analysis gate tests"; \
	    apt-get update -qq && RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	  else \
	    echo "prometheus is missing and this is not root with apt-get: the alert rule and analysis gate tests will skip (install Debian's prometheus package)"; \
	  fi; \
	fi

# The real node (REAL_NODE=1 and its e2e tests) runs Debian's containerd, runc, CNI plugins,
# iptables and conntrack.
.PHONY: realnodedeps
realnodedeps: ## Install Debian's containerd, runc, CNI plugins, iptables and conntrack (real node) when missing and root.
	@missing=""; \
	for pair in containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins iptables:iptables conntrack:conntrack; do \
	  bin=$${pair%%:*}; pkg=$${pair#*:}; \
	  if ! command -v $$bin >/dev/null && [ ! -x $$bin ] && [ ! -x /usr/sbin/$$bin ]; then missing="$$missing $$pkg"; fi; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's$$missing for the real node (REAL_NODE=1 and its e2e tests)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "Missing Debian packages$$missing and this is not root with apt-get: the real-node tests will skip (install them as root)"; \
	  fi; \
	fi

##@ Run

# REAL_NODE=1 makes `make cluster` and `make demo` run the control-plane node as a real node: kubelet,
# containerd, runc, the CNI bridge and kube-proxy (root and realnodedeps' Debian packages).
REAL_NODE_ON   := $(filter 1 true yes,$(REAL_NODE))
REAL_NODE_FLAG := $(if $(REAL_NODE_ON),--real-node)
REAL_NODE_DEPS := $(if $(REAL_NODE_ON),realnodedeps)

.PHONY: demo
demo: $(REAL_NODE_DEPS) ## Start the local control plane, apply testdata/demo and show the result; Ctrl-C stops it. REAL_NODE=1: a real control-plane node.
	$(call with-demo-tools,demo $(REAL_NODE_FLAG))

.PHONY: run
run: ## Run the webhook and rollout controller from this checkout against the current kubeconfig (e.g. `make cluster`) until Ctrl-C.
	$(LOCALCLUSTER) run $(RUN_FLAGS)

.PHONY: demo-down
demo-down: ## Stop local clusters left by `make demo` or `make cluster` (also after a killed terminal).
	$(LOCALCLUSTER) down

.PHONY: cluster
cluster: $(REAL_NODE_DEPS) ## Start an empty local control plane (1 control-plane + 4 worker nodes) until Ctrl-C. REAL_NODE=1: a real control-plane node.
	$(call with-demo-tools,up $(REAL_NODE_FLAG))

##@ Release

.PHONY: image
image: ## Build the image with ko into bin/release/image (OCI layout, SPDX SBOM in bin/release/sbom); REGISTRY=... pushes it.
	$(GO) run ./cmd/release image --version "$(VERSION)" --registry "$(REGISTRY)" --base "$(BASE)" --out "$(RELEASE_DIR)"

.PHONY: chart
chart: image ## Package the chart pinned to that image by digest into bin/release; REGISTRY=... pushes it to oci://REGISTRY/charts.
	$(GO) run ./cmd/release chart --version "$(VERSION)" --registry "$(REGISTRY)" --out "$(RELEASE_DIR)"

##@ Test

# make test runs go test through gotestsum (a pinned tool): the same output, as verbose as
# TEST_FLAGS asks, ending with each failed test and what it printed, so the end of a long log
# names what failed.
TEST_FORMAT = $(if $(filter -v,$(TEST_FLAGS)),standard-verbose,standard-quiet)

# The version suites: the packages whose tests talk to the API server (admission through
# kube-apiserver, the chart installed by helm, rollouts with gates, pre-flight, in-process
# injection), run again on another Kubernetes. make test runs every package on the newest
# supported Kubernetes, then the version suites on the oldest; docs/install.md lists the versions.
VERSION_SUITES := ./webhook/ ./charts/install/ ./controller/rollout/ ./internal/preflight/ ./internal/inprocess/
# KUBERNETES picks the control plane of make test-kubernetes: oldest, newest, or a minor (1.33).
KUBERNETES     ?= oldest

.PHONY: test
test: testbin lint ## Run every test on the newest Kubernetes, then the version suites on the oldest.
	gotestsum=$$($(TESTBIN) --print gotestsum); \
	  "$$gotestsum" --format $(TEST_FORMAT) --hide-summary=skipped -- -p $(TEST_PACKAGES) $(TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory test-kubernetes KUBERNETES=oldest

.PHONY: test-kubernetes
test-kubernetes: testbin ## Run the version suites on one Kubernetes (KUBERNETES=oldest, the default; newest; or 1.33), timed.
	@echo "Version suites on Kubernetes $(KUBERNETES): $(VERSION_SUITES)"
	@start=$$(date +%s); gotestsum=$$($(TESTBIN) --print gotestsum); \
	  rc=0; DAEMONGUARD_KUBERNETES_VERSION=$(KUBERNETES) "$$gotestsum" --format $(TEST_FORMAT) --hide-summary=skipped -- -p $(TEST_PACKAGES) $(TEST_FLAGS) $(VERSION_SUITES) || rc=$$?; \
	  echo "Version suites on Kubernetes $(KUBERNETES) took $$(( $$(date +%s) - start )) s"; exit $$rc

.PHONY: test-unit
test-unit: ## Run only the tests that need no cluster.
	$(GO) test $(TEST_FLAGS) -short ./...

# make fuzz finds every Fuzz function in the test files of the module's packages (go list, so no
# test binary is built just to list them) and fuzzes each for FUZZTIME in turn; FUZZ, a regex
# matching whole names, picks some (FUZZ=FuzzRead, FUZZ='Fuzz.*Agree'). A crash fails its target
# and Go writes the input to the package's testdata/fuzz/<Target>/: commit it with the fix, and
# plain `go test` replays it from then on. The run goes on with the next target and fails at the
# end naming the failed ones; logs and a summary (executions, corpus) are in $(FUZZ_LOGS).
# -short: no package's TestMain starts a local cluster. FUZZ_FLAGS: one worker per target (CI and
# laptops share their cores), and a new input minimized in at most 100 executions, not Go's default
# minute, during which the target does not run (golang/go#48820): a target whose coverage varies
# with map order (FuzzStatusOnlyUpdate, CEL) ran 30 times in a minute with 5s, 11,000 in 30s so. Go 1.26's coordinator can end a run at
# FUZZTIME with a bare "context deadline exceeded" and no failing input (golang/go#75804, fixed in
# Go 1.27): such a run counts as passed, a run that writes a failing input never does.
# FUZZ_TIMEOUT must exceed FUZZTIME (go test's default, 10m, would end FUZZTIME=10m as a failure).
FUZZTIME     ?= 1m
FUZZ         ?= .*
FUZZ_FLAGS   ?= -parallel 1 -fuzzminimizetime 100x
FUZZ_TIMEOUT ?= 2h
FUZZ_LOGS    ?= $(LOCALBIN)/fuzz

.PHONY: fuzz
fuzz: ## Fuzz every fuzz target for FUZZTIME each (default 1m; FUZZ=name or regex picks some); not run by `make test`.
	@mkdir -p $(FUZZ_LOGS); : > $(FUZZ_LOGS)/summary; failed=""; \
	while read -r pkg dir files; do \
	  [ -n "$$files" ] || continue; \
	  for name in $$(cd "$$dir" && sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$files | grep -xE '$(FUZZ)'); do \
	    log=$(FUZZ_LOGS)/$$(basename $$pkg).$$name.log; crashers="$$dir/testdata/fuzz/$$name"; \
	    before=$$(ls "$$crashers" 2>/dev/null | wc -l) || true; \
	    echo "== $$pkg $$name for $(FUZZTIME)"; \
	    if $(GO) test -short -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -timeout $(FUZZ_TIMEOUT) $(FUZZ_FLAGS) $$pkg </dev/null 2>&1 | tee $$log; then result=ok; \
	    elif [ "$$(ls "$$crashers" 2>/dev/null | wc -l)" = "$$before" ] && grep -qx '    context deadline exceeded' $$log && ! grep -q '^    --- FAIL' $$log; then result="ok (no input failed: the fuzztime race of golang/go#75804)"; \
	    else result=FAIL; failed="$$failed $$pkg.$$name"; fi; \
	    echo "$$result $$pkg $$name: $$(sed -n 's/.*execs: \([0-9]*\) .*new interesting: \([0-9]*\) (total: \([0-9]*\)).*/\1 executions, \2 new interesting inputs, corpus \3/p' $$log | tail -1)" >> $(FUZZ_LOGS)/summary; \
	  done; \
	done < <($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}{{end}}' ./...); \
	echo "== Summary ($(FUZZ_LOGS)/summary)"; cat $(FUZZ_LOGS)/summary; \
	if [ -n "$$failed" ]; then echo "Failed:$$failed"; exit 1; fi

.PHONY: policy-test
policy-test: ## Run the Rego tests of the built-in policies with OPA's test runner (daemonguard policy test policies).
	$(GO) run ./cmd/daemonguard policy test policies

.PHONY: helm-lint
helm-lint: testbin ## Lint the chart (helm lint --strict) and compare `helm template` with the goldens (UPDATE_GOLDEN=1 rewrites them).
	$(GO) test -count=1 -run 'TestLint|TestGolden|TestValuesSchemaRejects' ./charts/

.PHONY: bench
bench: testbin ## Run benchmarks (BENCH=regex).
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem ./...

.PHONY: scalebench
scalebench: testbin ## Scale benchmark: 1,000, 2,500 and 5,000 kwok nodes, 30 pods each (SCALEBENCH_NODES=1000,2500 picks sizes; SCALEBENCH_BEFORE=BINARY compares a build); writes docs/scale/.
	$(GO) test -count=1 -run '^$$' -bench Scale -benchtime 1x -timeout 300m ./test/scalebench/

.PHONY: bench-admission
bench-admission: demobin ## Latency daemonguard adds to DaemonSet writes through kube-apiserver, without vs with its webhooks (BENCH_FLAGS="--rates 10,100,500 --duration 20s").
	$(LOCALCLUSTER) bench-admission $(BENCH_FLAGS)

.PHONY: bench-peers
bench-peers: demobin ## Validating webhook against a null webhook and Gatekeeper, open loop, interleaved per rate: p50/p90/p99/max, CPU/review, RSS (BENCH_FLAGS="-rates 250,500,1000 -duration 10s -server-procs 1").
	$(TESTBIN) gatekeeper
	$(GO) run ./cmd/peerbench $(BENCH_FLAGS)

.PHONY: loadgen
loadgen: ## Open-loop load test of the webhooks against a null webhook, TLS on loopback (LOADGEN_FLAGS="-rates 1000 -duration 10s").
	$(GO) run ./cmd/loadgen $(LOADGEN_FLAGS)
