package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
)

// storedPatch has a binary hunk, a NUL and a terminal escape in a file's
// content: diff must print it byte for byte when piped.
var storedPatch = "diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-old\n+new \x1b[31mred\x00\n" +
	"diff --git a/b.bin b/b.bin\nGIT binary patch\nliteral 3\nKcmZQzWMTjS000310RR91\n\n"

// storeChanges records a change of default/<name> (a session that does not
// exist in the cluster: deleted) in the embedded server.
func storeChanges(t *testing.T, pub *events.Publisher, name string) {
	t.Helper()
	store := pub.ChangesStore()
	sum, err := json.Marshal(v1alpha1.Changes{Base: "1111111111111111", Head: "2222222222222222", Branch: "agent/" + name, Pushed: true,
		FilesChanged: 2, Insertions: 1, Deletions: 1,
		Files: []v1alpha1.FileChange{{Path: "a.txt", Status: "M", Insertions: 1, Deletions: 1}, {Path: "b.bin", Status: "A", Binary: true}}})
	if err != nil {
		t.Fatal(err)
	}
	for obj, data := range map[string][]byte{
		changes.PatchObject:                      []byte(storedPatch),
		changes.SummaryObject:                    sum,
		changes.ArtifactsObject:                  []byte(`["out/report.md"]`),
		changes.ArtifactPrefix + "out/report.md": []byte("# report\n"),
	} {
		if err := store.PutObject(t.Context(), "default", name, "uid-"+name, obj, data); err != nil {
			t.Fatal(err)
		}
	}
}

// diff and cp read the stored change of a deleted session: the patch byte
// for byte, the stat, an artifact; bad sources and missing changes give
// clear errors.
func TestDiffAndCpReadTheStoredChange(t *testing.T) {
	srv, pub := eventstest.Start(t, events.EmbeddedOptions{Port: -1}, events.PublisherOptions{})
	storeChanges(t, pub, "gone")
	url := srv.ClientURL()

	out, err := cli(t, url, "diff", "gone")
	if err != nil || out != storedPatch {
		t.Fatalf("diff = %q (%v), want the stored patch byte for byte", out, err)
	}
	out, err = cli(t, url, "diff", "gone", "--stat")
	if err != nil || !strings.Contains(out, "a.txt | +1 -1") || !strings.Contains(out, "b.bin | Bin") ||
		!strings.Contains(out, "2 files changed, 1 insertions(+), 1 deletions(-)") || !strings.Contains(out, "agent/gone (pushed)") {
		t.Fatalf("diff --stat = %q (%v)", out, err)
	}
	dest := t.TempDir()
	if _, err := cli(t, url, "cp", "gone:out/report.md", dest); err != nil {
		t.Fatalf("cp: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dest, "report.md")); err != nil || string(got) != "# report\n" {
		t.Fatalf("copied artifact %q (%v)", got, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"diff", "never-recorded"}, "no recorded changes"},
		{[]string{"diff", "gone", "--color", "pink"}, "--color"},
		{[]string{"cp", "gone:../etc/passwd", dest}, "relative to /workspace"},
		{[]string{"cp", "gone", dest}, "NAME:PATH"},
		{[]string{"cp", "gone:out/other.md", dest}, "spec.outputs"},
	} {
		if _, err := cli(t, url, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

// On a terminal the patch is coloured and the model's control characters
// are made inert.
func TestPrintColoredSanitizes(t *testing.T) {
	var b bytes.Buffer
	if err := printColored(&b, []byte(storedPatch), true); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "\x1b[31mred") || strings.Contains(out, "\x00") {
		t.Fatalf("the file's escape or NUL reached the terminal: %q", out)
	}
	for _, want := range []string{ansiGreen + "+new ", ansiRed + "-old" + ansiReset, ansiCyan + "@@ -1 +1 @@" + ansiReset, ansiBold + "diff --git a/a.txt b/a.txt"} {
		if !strings.Contains(out, want) {
			t.Fatalf("coloured patch lacks %q:\n%q", want, out)
		}
	}
}

// saveOutputs writes what run --output-dir promises: changes.patch,
// changes.json and the artifacts.
func TestSaveOutputs(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	storeChanges(t, pub, "ci")
	dir := filepath.Join(t.TempDir(), "out")
	ref := events.SessionRef{Namespace: "default", Name: "ci", UID: "uid-ci"}
	var js jetstream.JetStream = pub.JetStream()
	if err := saveOutputs(t.Context(), js, ref, dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"changes.patch":           storedPatch,
		"artifacts/out/report.md": "# report\n",
	} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Fatalf("%s = %q (%v), want %q", name, got, err, want)
		}
	}
	var c v1alpha1.Changes
	data, err := os.ReadFile(filepath.Join(dir, "changes.json"))
	if err != nil || json.Unmarshal(data, &c) != nil || c.Head != "2222222222222222" || len(c.Files) != 2 {
		t.Fatalf("changes.json %s (%v)", data, err)
	}
}
