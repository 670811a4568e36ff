#!/usr/bin/env bash
# Common settings for hack/ scripts. Source it; do not execute it.
# shellcheck disable=SC2034

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${HACK_DIR}/.." && pwd)"

# shellcheck source=hack/versions.env
. "${HACK_DIR}/versions.env"

AO_CACHE="${AO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-operator}"
K8S_BIN_DIR="${AO_CACHE}/k8s-${KUBERNETES_VERSION}"
ETCD_BIN_DIR="${AO_CACHE}/etcd-${ETCD_VERSION}"
ENVTEST_DIR="${AO_CACHE}/envtest-${KUBERNETES_VERSION}"
TOOLS_DIR="${AO_CACHE}/tools"
CLUSTER_DIR="${AO_CACHE}/cluster"
KUBECONFIG_PATH="${CLUSTER_DIR}/kubeconfig"

log()  { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die()  { printf '[%s] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

# go_env_for_builds sets the environment used for every scratch-module build.
go_env_for_builds() {
	export GOFLAGS="-mod=mod -buildvcs=false"
	export GONOSUMDB="${GONOSUMDB:+${GONOSUMDB},}k8s.io"
	export CGO_ENABLED=0
	if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:${PATH}"
	fi
}

# lock NAME: serialises concurrent builds of the same cached artefact (held until exit).
lock() {
	mkdir -p "${AO_CACHE}/locks"
	local fd
	exec {fd}>"${AO_CACHE}/locks/$1.lock"
	if ! flock -n "$fd"; then
		log "waiting for another build of $1 to finish"
		flock "$fd"
	fi
}

# apt_install installs the given Debian packages if any is missing, non-interactively.
apt_install() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" -eq 0 ] || die "need root to install: ${missing[*]}"
	log "apt: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if [ -z "${AO_APT_UPDATED:-}" ]; then
		apt-get update -qq || die "apt-get update failed"
		export AO_APT_UPDATED=1
	fi
	apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null \
		|| die "apt-get install ${missing[*]} failed"
}
