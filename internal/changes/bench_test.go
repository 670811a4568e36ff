package changes_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// BenchmarkRecordAndPush1000Files measures Succeeded → committed, patch
// stored and branch pushed for a change of 1 000 files (issue 17's target:
// under 5 s on the dev cluster; here through localenv and test/gitserver).
func BenchmarkRecordAndPush1000Files(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		f := newFixture(b)
		s := f.session(fmt.Sprintf("bench-%d", i), pushSpec("push"))
		if err := f.rec.Baseline(b.Context(), f.env, s); err != nil {
			b.Fatal(err)
		}
		for n := range 1000 {
			p := filepath.Join(f.workspace, "gen", fmt.Sprintf("file-%04d.txt", n))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(fmt.Sprintf("line %d\n", n)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		res := f.rec.Record(b.Context(), f.env, s, "bench")
		if res.PushReason != agentsv1.ReasonPushed || res.Changes.FilesChanged != 1000 {
			b.Fatalf("push %s (%s), %d files", res.PushReason, res.PushMessage, res.Changes.FilesChanged)
		}
	}
}
