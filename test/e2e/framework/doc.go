// Package framework holds helpers for the end-to-end suite in test/e2e: clients built from
// KUBECONFIG, a namespace per spec, exec into pods over WebSocket or SPDY (wired exactly as
// kubectl does), waits for pods and objects, a dump of a namespace's pods, logs and events
// for failed specs, and the hook that installs the operator.
//
// It talks to a real cluster only: hack/cluster.sh (make cluster-up), kind (hack/kind.sh)
// or any cluster that KUBECONFIG points at.
package framework
