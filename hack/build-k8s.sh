#!/usr/bin/env bash
# Builds the pinned Kubernetes components and etcd from the Go module proxy into the cache:
#   ${AO_CACHE}/k8s-<KUBERNETES_VERSION>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl}
#   ${AO_CACHE}/etcd-<ETCD_VERSION>/etcd
# A finished build is marked by a .complete stamp and reused; nothing is written to the repo.
#
# k8s.io/kubernetes replaces every staging module with ./staging/src/k8s.io/<m>, which the
# module zip lacks, so a scratch module requires k8s.io/kubernetes and replaces each of those
# modules with its published v0.x release. The replace list is read from the downloaded go.mod.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
go_env_for_builds

K8S_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

complete() { # dir stamp-content
	[ -f "$1/.complete" ] && [ "$(cat "$1/.complete")" = "$2" ]
}

build_etcd() {
	local stamp="etcd ${ETCD_VERSION}"
	if complete "${ETCD_BIN_DIR}" "$stamp"; then
		log "etcd ${ETCD_VERSION}: cached in ${ETCD_BIN_DIR}"
		return 0
	fi
	local work="${AO_CACHE}/build/etcd-${ETCD_VERSION}"
	rm -rf "$work" && mkdir -p "$work" "${ETCD_BIN_DIR}"
	cat >"$work/go.mod" <<EOM
module agent-operator.local/etcdbuild

go 1.26

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
EOM
	local t0=$SECONDS
	log "etcd ${ETCD_VERSION}: building (go build go.etcd.io/etcd/server/v3)"
	(cd "$work" && go build -trimpath -o "${ETCD_BIN_DIR}/etcd" go.etcd.io/etcd/server/v3)
	echo "$stamp" >"${ETCD_BIN_DIR}/.complete"
	log "etcd ${ETCD_VERSION}: built in $((SECONDS - t0))s"
}

build_k8s() {
	local stamp="kubernetes ${KUBERNETES_VERSION} ${K8S_COMPONENTS[*]}"
	if complete "${K8S_BIN_DIR}" "$stamp"; then
		log "kubernetes ${KUBERNETES_VERSION}: cached in ${K8S_BIN_DIR}"
		return 0
	fi
	local work="${AO_CACHE}/build/k8s-${KUBERNETES_VERSION}"
	rm -rf "$work" && mkdir -p "$work" "${K8S_BIN_DIR}"
	local t0=$SECONDS

	log "kubernetes ${KUBERNETES_VERSION}: fetching go.mod from the module proxy"
	local upstream_mod
	upstream_mod="$(cd "$work" && printf 'module agent-operator.local/probe\n' >go.mod &&
		go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
	[ -f "$upstream_mod" ] || die "could not download k8s.io/kubernetes@${KUBERNETES_VERSION} (is the version served by the proxy? GONOSUMDB=${GONOSUMDB})"

	local godirective
	godirective="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$upstream_mod" | head -n1)"
	{
		echo "module agent-operator.local/k8sbuild"
		echo
		echo "go ${godirective:-1.26}"
		echo
		# Keep upstream's godebug settings so the binaries behave as released.
		awk '/^godebug \(/{b=1} b{print} b&&/^\)/{b=0} /^godebug [^(]/{print}' "$upstream_mod"
		echo
		echo "require k8s.io/kubernetes ${KUBERNETES_VERSION}"
		echo
		echo "replace ("
		grep -Eo '^[[:space:]]*k8s\.io/[A-Za-z0-9._/-]+ => \./staging/src/k8s\.io/[A-Za-z0-9._/-]+' "$upstream_mod" |
			awk -v v="${KUBERNETES_STAGING_VERSION}" '{print "\t" $1 " => " $1 " " v}'
		echo ")"
	} >"$work/go.mod"
	local nrepl
	nrepl="$(grep -c ' => k8s.io/' "$work/go.mod" || true)"
	[ "$nrepl" -gt 10 ] || die "found only ${nrepl} staging replaces in ${upstream_mod}"
	log "kubernetes ${KUBERNETES_VERSION}: scratch module with ${nrepl} staging replaces (=> ${KUBERNETES_STAGING_VERSION})"

	local minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
	local pkg="k8s.io/component-base/version"
	local ldflags="-s -w -X ${pkg}.gitVersion=${KUBERNETES_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
	ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${KUBERNETES_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
	local pkgs=() c
	for c in "${K8S_COMPONENTS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done

	log "kubernetes ${KUBERNETES_VERSION}: building ${K8S_COMPONENTS[*]} in one go build (cold: ~25 min on 2 cores)"
	(cd "$work" && go build -trimpath -ldflags "$ldflags" -o "${K8S_BIN_DIR}/" "${pkgs[@]}")
	for c in "${K8S_COMPONENTS[@]}"; do
		[ -x "${K8S_BIN_DIR}/$c" ] || die "go build did not produce ${K8S_BIN_DIR}/$c"
	done
	echo "$stamp" >"${K8S_BIN_DIR}/.complete"
	log "kubernetes ${KUBERNETES_VERSION}: built in $((SECONDS - t0))s"
}

main() {
	mkdir -p "${AO_CACHE}"
	lock build-k8s
	case "${1:-all}" in
	etcd) build_etcd ;;
	kubernetes | k8s) build_k8s ;;
	all) build_k8s; build_etcd ;;
	*) die "usage: $0 [all|kubernetes|etcd]" ;;
	esac
}
main "$@"
