#!/usr/bin/env bash
# Prints a KUBEBUILDER_ASSETS directory for controller-runtime's envtest: kube-apiserver,
# etcd and kubectl from the same cached build as the local cluster (hack/build-k8s.sh).
#   export KUBEBUILDER_ASSETS="$(hack/envtest-assets.sh)"
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"${HACK_DIR}/build-k8s.sh" all >&2
mkdir -p "${ENVTEST_DIR}"
ln -sfn "${K8S_BIN_DIR}/kube-apiserver" "${ENVTEST_DIR}/kube-apiserver"
ln -sfn "${K8S_BIN_DIR}/kubectl" "${ENVTEST_DIR}/kubectl"
ln -sfn "${ETCD_BIN_DIR}/etcd" "${ENVTEST_DIR}/etcd"
echo "${ENVTEST_DIR}"
