// Package testenv is TEST SUPPORT: it starts a real kube-apiserver and etcd
// (controller-runtime envtest) with the agent-operator CRDs for the suites
// of the controllers and the kubectl plugin. The binaries are found through
// KUBEBUILDER_ASSETS or TEST_ASSET_KUBE_APISERVER/TEST_ASSET_ETCD, else in
// the cache that hack/build-k8s.sh fills
// (${AO_CACHE:-${XDG_CACHE_HOME:-~/.cache}/agent-operator}). Only _test.go
// files may import this package.
package testenv
