package loop_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoKubernetesOrNATSDependencies: internal/loop and its sub-packages
// import nothing from k8s.io, sigs.k8s.io or NATS.
func TestNoKubernetesOrNATSDependencies(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/") || strings.HasPrefix(pkg, "sigs.k8s.io/") || strings.Contains(pkg, "nats-io") {
			t.Errorf("forbidden dependency %s", pkg)
		}
	}
}
