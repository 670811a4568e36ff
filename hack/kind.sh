#!/usr/bin/env bash
# The kind path, for machines with a Docker engine: a kind cluster that runs the same images
# and e2e suite as the local cluster of hack/cluster.sh.
#   hack/kind.sh up|load|e2e|down|kubeconfig
# `make kind-e2e` runs: up, images (build), load, e2e, down.
# Needs `docker info` to succeed; the CI machines and the dev VMs have no Docker engine, so
# this path is not exercised there.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KIND_CLUSTER="${KIND_CLUSTER:-agent-operator}"
KIND_DIR="${AO_CACHE}/kind"
KIND_KUBECONFIG="${KIND_DIR}/kubeconfig"
IMAGES_OUT="${IMAGES_OUT:-${REPO_ROOT}/_output/images}"

require_docker() {
	command -v docker >/dev/null 2>&1 || die "kind needs Docker: no docker CLI found (use hack/cluster.sh instead)"
	docker info >/dev/null 2>&1 || die "kind needs a running Docker engine: 'docker info' failed (use hack/cluster.sh instead)"
}

kind_bin() {
	"${HACK_DIR}/go-tool.sh" kind sigs.k8s.io/kind "${KIND_VERSION}" sigs.k8s.io/kind
}

up() {
	require_docker
	local kind
	kind="$(kind_bin)"
	mkdir -p "${KIND_DIR}"
	if "$kind" get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER}"; then
		log "kind cluster ${KIND_CLUSTER} exists"
		"$kind" get kubeconfig --name "${KIND_CLUSTER}" >"${KIND_KUBECONFIG}"
	else
		# The same per-pod pids limit as hack/cluster.sh (the fork-bomb containment of docs/security.md).
		cat >"${KIND_DIR}/config.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
- role: control-plane
  kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    podPidsLimit: 1024
    maxPods: 250
EOF
		"$kind" create cluster --name "${KIND_CLUSTER}" --kubeconfig "${KIND_KUBECONFIG}" --wait 3m \
			--config "${KIND_DIR}/config.yaml" ${KIND_NODE_IMAGE:+--image "${KIND_NODE_IMAGE}"}
	fi
	echo "KUBECONFIG=${KIND_KUBECONFIG}"
}

load() {
	require_docker
	local kind t
	kind="$(kind_bin)"
	for t in "${IMAGES_OUT}"/*.tar; do
		[ -e "$t" ] || die "no image tarballs in ${IMAGES_OUT}: run 'make images' first"
		# The sandbox image of kind's containerd is its own; ours is only for hack/cluster.sh.
		[ "$(basename "$t")" = pause.tar ] && continue
		log "loading $(basename "$t") into kind cluster ${KIND_CLUSTER}"
		"$kind" load image-archive "$t" --name "${KIND_CLUSTER}"
	done
}

e2e() {
	[ -f "${KIND_KUBECONFIG}" ] || die "no kind cluster kubeconfig at ${KIND_KUBECONFIG}: run '$0 up'"
	cd "${REPO_ROOT}"
	KUBECONFIG="${KIND_KUBECONFIG}" go test -count=1 -timeout 60m -tags e2e ./test/e2e/... -v -ginkgo.v -ginkgo.no-color
}

down() {
	require_docker
	"$(kind_bin)" delete cluster --name "${KIND_CLUSTER}" --kubeconfig "${KIND_KUBECONFIG}"
}

case "${1:-}" in
up) up ;;
load) load ;;
e2e) e2e ;;
down) down ;;
kubeconfig) echo "${KIND_KUBECONFIG}" ;;
*) die "usage: $0 up|load|e2e|down|kubeconfig" ;;
esac
