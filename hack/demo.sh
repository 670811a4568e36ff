#!/usr/bin/env bash
# Deploys the operator into the cluster KUBECONFIG points at (by default the local cluster of
# hack/cluster.sh), runs a sample AgentSession and shows its events. `make demo` runs
# cluster-up and images first.
#
# Deploy, in this order of preference:
#   1. the Helm chart in charts/agent-operator (helm from `make tools`), with the :dev images;
#   2. kustomize manifests in config/default (kubectl apply -k).
# Sample: config/samples/*scripted*.yaml (no API key needed), else the first
# config/samples/agentsession*.yaml, or $DEMO_SAMPLE.
# When a piece does not exist yet, the script says which and exits 2.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export KUBECONFIG="${KUBECONFIG:-${KUBECONFIG_PATH}}"
KUBECTL="${K8S_BIN_DIR}/kubectl"
[ -x "$KUBECTL" ] || KUBECTL="$(command -v kubectl || true)"
[ -n "$KUBECTL" ] || die "no kubectl: run hack/build-k8s.sh"
NAMESPACE="${DEMO_NAMESPACE:-agent-operator-system}"
SAMPLE_NAMESPACE="${DEMO_SAMPLE_NAMESPACE:-default}"
TIMEOUT="${DEMO_TIMEOUT:-300}"
k() { "$KUBECTL" "$@"; }

missing() {
	log "demo cannot run yet: $*"
	exit 2
}

deploy_failed() {
	k -n "${NAMESPACE}" get pods,pvc -o wide || true
	k -n "${NAMESPACE}" get events --sort-by=.lastTimestamp | tail -n 20 || true
	die "the operator did not become ready in ${NAMESPACE} (pods and events above)"
}

deploy() {
	local chart="${REPO_ROOT}/charts/agent-operator"
	if [ -f "$chart/Chart.yaml" ]; then
		local helm
		helm="$("${HACK_DIR}/go-tool.sh" helm helm.sh/helm/v3 "${HELM_VERSION}" helm.sh/helm/v3/cmd/helm)"
		local args=()
		# The local cluster has no dynamic volume provisioner: keep the embedded NATS store in
		# an emptyDir there instead of a PersistentVolumeClaim that would never bind.
		if ! k get storageclass -o jsonpath='{.items[*].metadata.annotations.storageclass\.kubernetes\.io/is-default-class}' 2>/dev/null | grep -q true; then
			log "no default StorageClass: deploying with nats.embedded.store.type=emptyDir"
			args+=(--set nats.embedded.store.type=emptyDir)
		fi
		log "deploying the operator with Helm from charts/agent-operator into ${NAMESPACE}"
		# shellcheck disable=SC2086 # DEMO_HELM_ARGS is a list of words on purpose
		"$helm" upgrade --install agent-operator "$chart" --namespace "${NAMESPACE}" --create-namespace \
			--wait --timeout "${TIMEOUT}s" "${args[@]}" ${DEMO_HELM_ARGS:-} || deploy_failed
	elif [ -f "${REPO_ROOT}/config/default/kustomization.yaml" ]; then
		log "deploying the operator with kubectl apply -k config/default"
		k apply --server-side -k "${REPO_ROOT}/config/default"
		k -n "${NAMESPACE}" wait --for=condition=Available deployment --all --timeout "${TIMEOUT}s" || deploy_failed
	else
		missing "no operator deployment: neither charts/agent-operator/Chart.yaml nor config/default/kustomization.yaml exists"
	fi
}

run_sample() {
	local sample="${DEMO_SAMPLE:-}"
	if [ -z "$sample" ]; then
		# The scripted sample needs no API key; otherwise the first sample.
		local candidates=("${REPO_ROOT}"/config/samples/*scripted*.yaml "${REPO_ROOT}"/config/samples/agentsession*.yaml)
		local c
		for c in "${candidates[@]}"; do
			if [ -f "$c" ]; then
				sample="$c"
				break
			fi
		done
	fi
	[ -n "$sample" ] && [ -f "$sample" ] || missing "no sample AgentSession in config/samples/ (or set DEMO_SAMPLE)"
	log "creating the sample session from ${sample#"${REPO_ROOT}"/}"
	local name
	# A fresh run each time: drop what an earlier demo left.
	k -n "${SAMPLE_NAMESPACE}" delete -f "$sample" --ignore-not-found --wait >/dev/null
	name="$(k -n "${SAMPLE_NAMESPACE}" create -f "$sample" -o name | sed -n 's|^agentsession[^/]*/||p' | head -n1)"
	[ -n "$name" ] || die "${sample} holds no AgentSession"
	log "AgentSession ${SAMPLE_NAMESPACE}/${name} created; waiting up to ${TIMEOUT}s for it to finish"
	local phase="" deadline=$((SECONDS + TIMEOUT))
	while [ "$SECONDS" -lt "$deadline" ]; do
		phase="$(k -n "${SAMPLE_NAMESPACE}" get agentsession "$name" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
		case "$phase" in Succeeded | Failed | Aborted | AwaitingInput) break ;; esac
		sleep 2
	done
	echo
	k -n "${SAMPLE_NAMESPACE}" get agentsession "$name" -o wide || true
	echo
	log "events of AgentSession ${name}:"
	k -n "${SAMPLE_NAMESPACE}" get events --field-selector "involvedObject.name=${name}" \
		--sort-by=.metadata.creationTimestamp -o custom-columns=TIME:.metadata.creationTimestamp,TYPE:.type,REASON:.reason,MESSAGE:.message || true
	show_session "$name"
	case "$phase" in
	Succeeded | AwaitingInput) log "demo finished: session ${name} is ${phase}" ;;
	*) die "demo: session ${name} ended in phase '${phase:-<none>}' (see the events above and 'kubectl -n ${NAMESPACE} logs deploy/...')" ;;
	esac
}

# clean removes what the demo left: the sample sessions (while the operator still runs, so
# their finalizers complete), the Helm release and its namespace.
clean() {
	local chart="${REPO_ROOT}/charts/agent-operator" f
	for f in "${REPO_ROOT}"/config/samples/agentsession*.yaml; do
		k -n "${SAMPLE_NAMESPACE}" delete -f "$f" --ignore-not-found --wait --timeout 120s >/dev/null || true
	done
	if [ -f "$chart/Chart.yaml" ]; then
		local helm
		helm="$("${HACK_DIR}/go-tool.sh" helm helm.sh/helm/v3 "${HELM_VERSION}" helm.sh/helm/v3/cmd/helm)"
		"$helm" uninstall agent-operator --namespace "${NAMESPACE}" --wait --timeout 120s 2>/dev/null || true
	fi
	k delete namespace "${NAMESPACE}" --ignore-not-found --wait --timeout 120s >/dev/null || true
	log "demo removed: sample sessions, the agent-operator release and namespace ${NAMESPACE}"
}

# show_session prints the session as a user reads it: the conversation (kubectl agent logs) and
# the change it made (kubectl agent diff), with the plugin built from this checkout.
show_session() {
	local name="$1" plugin="${AO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-operator}/bin/kubectl-agent"
	mkdir -p "$(dirname "$plugin")"
	if ! (cd "${REPO_ROOT}" && go build -o "$plugin" ./cmd/kubectl-agent); then
		log "could not build the kubectl-agent plugin; skipping the conversation and the diff"
		return 0
	fi
	echo
	log "kubectl agent logs ${name}:"
	"$plugin" logs -n "${SAMPLE_NAMESPACE}" --operator-namespace "${NAMESPACE}" "$name" || log "kubectl agent logs failed (see above)"
	echo
	log "kubectl agent diff ${name}:"
	"$plugin" diff -n "${SAMPLE_NAMESPACE}" --operator-namespace "${NAMESPACE}" "$name" || log "kubectl agent diff failed (see above)"
	log "(the plugin is ${plugin}; put it on PATH to use it as 'kubectl agent')"
}

k version >/dev/null 2>&1 || die "cannot reach the cluster (KUBECONFIG=${KUBECONFIG}); run 'make cluster-up'"
if [ "${1:-}" = clean ]; then
	clean
	exit 0
fi
deploy
run_sample
