#!/usr/bin/env bash
# Builds the project's images (hack/images) into _output/images and, when the local cluster
# is up, imports them into its containerd (namespace k8s.io).
#   hack/images.sh [build|import|all] [image,...]
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT="${IMAGES_OUT:-${REPO_ROOT}/_output/images}"
SOCK="${CLUSTER_DIR}/run/containerd.sock"
action="${1:-all}"
only="${2:-}"

build() {
	local rootfs_args=()
	if [ -z "$only" ] || [[ ",$only," == *,workspace,* ]]; then
		local rootfs rc=0
		rootfs="$("${HACK_DIR}/workspace-rootfs.sh")" || rc=$?
		if [ "$rc" -eq 0 ]; then
			rootfs_args=(-workspace-rootfs "$rootfs")
		else
			apt_install busybox-static
			log "WARNING: debootstrap unavailable; the workspace image falls back to busybox-static (no python3, no git)"
			rootfs_args=(-workspace-busybox /bin/busybox)
		fi
	fi
	local busybox_args=()
	if [ -z "$only" ] || [[ ",$only," == *,busybox,* ]]; then
		apt_install busybox-static
		busybox_args=(-busybox /bin/busybox)
	fi
	(cd "${REPO_ROOT}" && go run ./hack/images -out "$OUT" ${only:+-images "$only"} "${rootfs_args[@]}" "${busybox_args[@]}")
}

import() {
	if [ ! -S "$SOCK" ]; then
		log "local cluster not running (no ${SOCK}); images are in ${OUT} (load them into your cluster yourself, e.g. hack/kind.sh)"
		return 0
	fi
	local t
	for t in "$OUT"/*.tar; do
		[ -e "$t" ] || continue
		local n
		n="$(basename "$t" .tar)"
		if [ -n "$only" ] && [[ ",$only," != *,"$n",* ]]; then continue; fi
		ctr --address "$SOCK" -n k8s.io images import "$t" >/dev/null
		log "imported docker.io/agent-operator/${n}:dev into the local cluster"
	done
}

case "$action" in
build) build ;;
import) import ;;
all) build; import ;;
*) die "usage: $0 [build|import|all] [image,...]" ;;
esac
