package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Start finds the envtest binaries and starts an API server with the CRDs
// in crdDir installed. The caller stops the returned environment.
func Start(crdDir string) (*envtest.Environment, *rest.Config, error) {
	if err := FindAssets(); err != nil {
		return nil, nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{crdDir},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("start envtest: %w", err)
	}
	return env, cfg, nil
}

// FindAssets points envtest at its binaries: it keeps KUBEBUILDER_ASSETS or
// TEST_ASSET_KUBE_APISERVER/TEST_ASSET_ETCD when set, else uses the newest
// envtest-* directory (what `make envtest-assets` prepares) or the newest
// k8s-*/kube-apiserver and etcd-*/etcd builds in the cache.
func FindAssets() error {
	if os.Getenv("KUBEBUILDER_ASSETS") != "" ||
		(os.Getenv("TEST_ASSET_KUBE_APISERVER") != "" && os.Getenv("TEST_ASSET_ETCD") != "") {
		return nil
	}
	cache := os.Getenv("AO_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "agent-operator")
	}
	// Glob sorts, so the last entry is the newest version.
	if dirs, _ := filepath.Glob(filepath.Join(cache, "envtest-*")); len(dirs) > 0 {
		return os.Setenv("KUBEBUILDER_ASSETS", dirs[len(dirs)-1])
	}
	apiservers, _ := filepath.Glob(filepath.Join(cache, "k8s-*", "kube-apiserver"))
	etcds, _ := filepath.Glob(filepath.Join(cache, "etcd-*", "etcd"))
	if len(apiservers) == 0 || len(etcds) == 0 {
		return fmt.Errorf("envtest binaries not found: set KUBEBUILDER_ASSETS or build them with hack/build-k8s.sh into %s", cache)
	}
	if err := os.Setenv("TEST_ASSET_KUBE_APISERVER", apiservers[len(apiservers)-1]); err != nil {
		return fmt.Errorf("set TEST_ASSET_KUBE_APISERVER: %w", err)
	}
	if err := os.Setenv("TEST_ASSET_ETCD", etcds[len(etcds)-1]); err != nil {
		return fmt.Errorf("set TEST_ASSET_ETCD: %w", err)
	}
	return nil
}

// Eventually calls cond every 100 ms until it returns nil, and fails the
// test with what and cond's last error when timeout passes or the test's
// context ends.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("%s: %v", what, err)
}
