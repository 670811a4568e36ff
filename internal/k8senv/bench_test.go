package k8senv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// BenchmarkReadFile compares a small read_file over the persistent stream,
// over one exec per call (like kubectl exec) and on the local machine,
// against the in-process API server/kubelet harness. It reports the median
// and p99 latency.
func BenchmarkReadFile(b *testing.B) {
	content := []byte(strings.Repeat("a line of a small source file\n", 40))
	run := func(b *testing.B, env tool.ExecutionEnvironment) {
		ctx := b.Context()
		// Warm up (opens the persistent stream).
		if _, err := env.ReadFile(ctx, "small.txt", tool.ReadOptions{}); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for b.Loop() {
			start := time.Now()
			fc, err := env.ReadFile(ctx, "small.txt", tool.ReadOptions{})
			lat = append(lat, time.Since(start))
			if err != nil || len(fc.Content) != len(content) {
				b.Fatalf("ReadFile = %v, %v", fc, err)
			}
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "median-µs")
		b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds()), "p99-µs")
	}
	for _, mode := range []struct {
		name string
		mode Mode
	}{{"persistent", Persistent}, {"per-call", PerCall}} {
		b.Run(mode.name, func(b *testing.B) {
			h := newHarness(b)
			if err := os.WriteFile(filepath.Join(h.root, "small.txt"), content, 0o644); err != nil {
				b.Fatal(err)
			}
			cfg := h.config()
			cfg.Mode = mode.mode
			p, err := NewPool(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			run(b, p.Env(h.target()))
		})
	}
	b.Run("localenv", func(b *testing.B) {
		root := b.TempDir()
		if err := os.WriteFile(filepath.Join(root, "small.txt"), content, 0o644); err != nil {
			b.Fatal(err)
		}
		env, err := localenv.New(root)
		if err != nil {
			b.Fatal(err)
		}
		defer env.Close()
		run(b, env)
	})
}

// BenchmarkSessionFirstCall measures a claimed pod's first call of a
// session (stream open included): over a new exec stream, and over the
// spare stream Preopen kept to the pod, which the session takes over. It
// reports the median latency.
func BenchmarkSessionFirstCall(b *testing.B) {
	for _, spare := range []bool{false, true} {
		name := "fresh"
		if spare {
			name = "spare"
		}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b)
			owners := b.TempDir()
			warm := warmPod(h)
			claimWarmPod(h)
			warm.Expect = h.target().Expect // the pod is relabelled once, up front
			lat := make([]time.Duration, 0, b.N)
			epoch := int64(0)
			for b.Loop() {
				b.StopTimer()
				cfg := h.config()
				cfg.ServeArgs = []string{"--owner-dir", owners}
				p, err := NewPool(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if spare {
					if err := p.Preopen(b.Context(), warm); err != nil {
						b.Fatal(err)
					}
				}
				epoch++
				env := p.Env(sessionTarget(h, executor.Owner{SessionUID: "uid-1", Holder: "h", Epoch: epoch}))
				b.StartTimer()
				start := time.Now()
				_, err = env.FileExists(b.Context(), ".")
				lat = append(lat, time.Since(start))
				b.StopTimer()
				p.Close()
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "median-µs")
		})
	}
}

// BenchmarkSessionsOnOnePod: the first call of each of 32 sessions (one
// owner each) sharing a pod, with call owners (one stream for all) and
// against an executor that predates them (a stream per owner; that
// executor is this test binary, slower to start than the sidecar, so only
// the exec count compares). It reports the exec streams opened per round.
func BenchmarkSessionsOnOnePod(b *testing.B) {
	const sessions = 32
	bin, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, old := range []bool{false, true} {
		name := "call-owners"
		if old {
			name = "stream-per-owner"
		}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b)
			owners := b.TempDir()
			rounds := 0
			for b.Loop() {
				b.StopTimer()
				cfg := h.config()
				cfg.ServeArgs = []string{"--owner-dir", owners}
				if old {
					cfg.SidecarPath = bin // serveOldExecutor
				}
				p, err := NewPool(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				errs := make(chan error, sessions)
				for i := range sessions {
					go func() {
						_, err := p.Env(ownedTarget(h, sessionOwner(i))).FileExists(b.Context(), ".")
						errs <- err
					}()
				}
				for range sessions {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				p.Close()
				rounds++
				b.StartTimer()
			}
			b.ReportMetric(float64(h.websocketExecs.Load()+h.spdyExecs.Load())/float64(rounds), "execs/op")
		})
	}
}
