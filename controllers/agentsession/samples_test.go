package agentsession

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// TestSamplesAreAccepted creates every object of config/samples with a
// server-side dry run, so the samples cannot drift from the CRD's validation.
func TestSamplesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "agentsession_*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("want at least 5 samples, found %v (%v)", files, err)
	}
	ns := newNamespace(t)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---\n")) {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			u.SetNamespace(ns)
			if err := testClient.Create(t.Context(), &u, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s rejected: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
		}
	}
}
