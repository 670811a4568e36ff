# agent-operator Makefile. `make help` lists the targets.
#
# Everything heavy (Kubernetes binaries, etcd, Go tools, the workspace rootfs, the local
# cluster's state) is cached outside the repository in $(AO_CACHE), keyed by version.
# Versions are pinned in hack/versions.env.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

include hack/versions.env

GO ?= go
AO_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agent-operator
export AO_CACHE

TOOLS_DIR := $(AO_CACHE)/tools
## Go tools, built on demand into the cache (make tools).
CONTROLLER_GEN := $(TOOLS_DIR)/controller-gen-$(CONTROLLER_TOOLS_VERSION)/controller-gen
HELM := $(TOOLS_DIR)/helm-$(HELM_VERSION)/helm
CRICTL := $(TOOLS_DIR)/crictl-$(CRICTL_VERSION)/crictl
export CONTROLLER_GEN HELM

## Kubernetes binaries of the local cluster and of envtest.
K8S_BIN_DIR := $(AO_CACHE)/k8s-$(KUBERNETES_VERSION)
KUBECTL := $(K8S_BIN_DIR)/kubectl
# The e2e specs run it (test/e2e reads $KUBECTL).
export KUBECTL
KUBEBUILDER_ASSETS := $(AO_CACHE)/envtest-$(KUBERNETES_VERSION)

## The local cluster's kubeconfig. `make e2e` uses $KUBECONFIG instead when it is set.
LOCAL_KUBECONFIG := $(AO_CACHE)/cluster/kubeconfig

IMAGES_OUT ?= $(CURDIR)/_output/images
export IMAGES_OUT
# CI runs every test afresh rather than trusting cached results.
UNIT_FLAGS ?= -timeout 30m $(if $(CI),-count=1)
# The specs labelled bench measure rather than test; `make bench` runs them.
E2E_FLAGS ?= -count=1 -timeout 60m -v -ginkgo.v -ginkgo.no-color -ginkgo.label-filter='!bench'

##@ Aggregates

.PHONY: test
test: ## CI entry point: verify-gen, vet, fmt, chart, unit, fuzz (300000 inputs each), cluster-up, images, e2e, cluster-down (always); prints phase times.
	@hack/test.sh

.PHONY: demo
demo: cluster-up images ## Cluster up, images, deploy the operator and run a sample session (hack/demo.sh).
	@KUBECONFIG="$(LOCAL_KUBECONFIG)" hack/demo.sh

.PHONY: demo-clean
demo-clean: ## Remove what `make demo` installed (sample sessions, the agent-operator release and namespace); the cluster stays.
	@KUBECONFIG="$(LOCAL_KUBECONFIG)" hack/demo.sh clean

.PHONY: bench
bench: ## Benchmarks and the load spec on one cluster: one table of figure, result, target, previous (hack/bench-previous.tsv); BENCH_FANOUT=100,1000 (hack/bench.sh; KUBECONFIG or the local cluster).
	@hack/bench.sh

##@ Checks

.PHONY: verify-gen
verify-gen: ## Fail if `make generate manifests` changes the tree (no-op until api/ exists).
	@hack/verify-gen.sh

# Fuzz targets run by `make fuzz`, as package:FuzzName (go test -fuzz takes one target at a time).
FUZZ_TARGETS := ./internal/loop/patch:FuzzParse ./internal/loop/patch:FuzzApply \
	./internal/executor:FuzzDecodeFrame ./internal/loop/builtin:FuzzFindSpans \
	./internal/loop/tool:FuzzMatchSegments ./internal/executor:FuzzOpenFrame
FUZZTIME ?= 20s

.PHONY: fuzz
fuzz: ## Run each fuzz target for $(FUZZTIME): apply_patch parser and applier, executor frames, edit_file matching, glob matching.
	@for t in $(FUZZ_TARGETS); do \
		pkg="$${t%%:*}"; name="$${t##*:}"; \
		echo "fuzz: $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg" || exit 1; \
	done

.PHONY: generate
generate: $(CONTROLLER_GEN) $(HELM) ## Regenerate deepcopy code, CRDs and RBAC from the API markers, and config/admission from the chart (hack/generate.sh).
	@if [ -f hack/generate.sh ]; then bash hack/generate.sh; else echo "generate: no hack/generate.sh yet"; fi

.PHONY: manifests
manifests: generate ## Same generator as `generate` (CRDs and RBAC are produced together).

.PHONY: vet
vet: ## go vet ./... (and the e2e-tagged packages).
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/...

.PHONY: fmt
fmt: ## Fail if any Go file is not gofmt-formatted.
	@out="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi; echo "gofmt: clean"

.PHONY: chart
chart: $(HELM) ## helm lint the chart and render it with embedded and with external NATS.
	$(HELM) lint charts/agent-operator
	$(HELM) template agent-operator charts/agent-operator >/dev/null
	$(HELM) template agent-operator charts/agent-operator --set nats.mode=external \
		--set nats.external.url=nats://nats.example:4222 --set replicaCount=2 >/dev/null
	$(HELM) template agent-operator charts/agent-operator \
		--api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy >/dev/null
	@echo "chart: lint and template ok"

.PHONY: unit
unit: envtest-assets ## Unit tests (go test ./...), envtest binaries via KUBEBUILDER_ASSETS.
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" $(GO) test $(UNIT_FLAGS) ./...

.PHONY: e2e
e2e: ## e2e suite against $KUBECONFIG if set, else against the local cluster (cluster-up and images first).
	@if [ -n "$${KUBECONFIG:-}" ]; then \
		echo "e2e: using KUBECONFIG=$$KUBECONFIG (cluster-up and image import skipped)"; \
	else \
		$(MAKE) --no-print-directory cluster-up images; \
		export KUBECONFIG="$(LOCAL_KUBECONFIG)"; \
	fi; \
	mkdir -p _output; set -o pipefail; $(GO) test -tags e2e ./test/e2e/... $(E2E_FLAGS) 2>&1 | tee _output/e2e.log

##@ Local cluster (root, Debian 12, no Docker)

.PHONY: cluster-up
cluster-up: ## Bring up the local single-node cluster (idempotent); kubeconfig: $$AO_CACHE/cluster/kubeconfig.
	@hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Tear it down and verify nothing (process, mount, iptables chain, cgroup) is left.
	@hack/cluster.sh down

.PHONY: cluster-status
cluster-status: ## Components, pids, memory and log files of the local cluster.
	@hack/cluster.sh status

.PHONY: bootstrap
bootstrap: ## Install Debian packages (root) and build the cached Kubernetes binaries, etcd and tools for `make test`.
	@if [ "$$(id -u)" -eq 0 ]; then hack/cluster.sh deps; else echo "bootstrap: not root, skipping Debian packages"; fi
	@hack/build-k8s.sh all
	@hack/envtest-assets.sh >/dev/null
	@$(MAKE) --no-print-directory $(CONTROLLER_GEN) $(CRICTL)

.PHONY: k8s
k8s: ## Build (once) the pinned Kubernetes components and etcd into the cache.
	@hack/build-k8s.sh all

.PHONY: envtest-assets
envtest-assets: ## Print KUBEBUILDER_ASSETS (kube-apiserver, etcd, kubectl for envtest).
	@dir="$$(hack/envtest-assets.sh)"; echo "KUBEBUILDER_ASSETS=$$dir"

##@ Images

.PHONY: images
images: ## Build images into $(IMAGES_OUT) (docker-archive + OCI layout) and import them into the local cluster if it runs.
	@hack/images.sh all

.PHONY: images-build
images-build: ## Build images only (no import).
	@hack/images.sh build

.PHONY: images-import
images-import: ## Import the built images into the local cluster's containerd.
	@hack/images.sh import

##@ Tools

.PHONY: tools
tools: $(CONTROLLER_GEN) $(HELM) $(CRICTL) ## Build controller-gen, helm and crictl into the cache.
	@echo "CONTROLLER_GEN=$(CONTROLLER_GEN)"; echo "HELM=$(HELM)"; echo "CRICTL=$(CRICTL)"; echo "KUBECTL=$(KUBECTL)"

$(CONTROLLER_GEN):
	@hack/go-tool.sh controller-gen sigs.k8s.io/controller-tools $(CONTROLLER_TOOLS_VERSION) sigs.k8s.io/controller-tools/cmd/controller-gen >/dev/null
$(HELM):
	@hack/go-tool.sh helm helm.sh/helm/v3 $(HELM_VERSION) helm.sh/helm/v3/cmd/helm >/dev/null
$(CRICTL):
	@hack/go-tool.sh crictl sigs.k8s.io/cri-tools $(CRICTL_VERSION) sigs.k8s.io/cri-tools/cmd/crictl >/dev/null

.PHONY: controller-gen helm crictl
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen only.
helm: $(HELM) ## Build helm only.
crictl: $(CRICTL) ## Build crictl only.

##@ kind (machines with a Docker engine only)

.PHONY: kind-e2e
kind-e2e: images-build ## Create a kind cluster, load the images, run e2e, delete the cluster.
	@hack/kind.sh up
	@hack/kind.sh load
	@status=0; hack/kind.sh e2e || status=$$?; hack/kind.sh down; exit $$status

##@ Console

.PHONY: ui
ui: ## Build the console frontend (web/console: npm ci, vitest, vite build) into cmd/kubectl-agent/ui/dist (hack/ui.sh).
	@hack/ui.sh

##@ Misc

.PHONY: clean
clean: ## Remove _output/ (the cache in $(AO_CACHE) stays; delete it by hand to start cold).
	rm -rf _output

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^##@/ {printf "\n%s\n", substr($$0, 5)} /^[a-zA-Z0-9_.-]+:.*##/ {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
