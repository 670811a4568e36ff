package changes_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// readLog is instrumentation, not a stand-in: a real localenv.Env that
// notes the paths ReadFile is asked for.
type readLog struct {
	*localenv.Env
	mu    sync.Mutex
	paths []string
}

func (l *readLog) ReadFile(ctx context.Context, p string, o tool.ReadOptions) (*tool.FileContent, error) {
	l.mu.Lock()
	l.paths = append(l.paths, p)
	l.mu.Unlock()
	return l.Env.ReadFile(ctx, p, o)
}

// readPack reports whether the push's pack file, or a part of it cut for
// reading in chunks, was read.
func (l *readLog) readPack() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.paths, func(p string) bool { return strings.HasSuffix(p, "/pack") || strings.HasSuffix(p, "/part") })
}

// writeRandom writes n incompressible bytes to name in the workspace.
func (f *fixture) writeRandom(t *testing.T, name string, n int) {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	f.write(t, name, string(b))
}

// A pack over Recorder.MaxPackBytes fails the push with a message naming
// the limit and what to do; it is never read, nothing reaches the remote,
// and the change (its patch) stays recorded.
func TestRecordPackLimit(t *testing.T) {
	tests := []struct {
		name  string
		limit int64 // Recorder.MaxPackBytes
		big   int   // random bytes added to the change
		fail  bool
	}{
		{name: "small change under a lowered limit", limit: 64 << 10},
		{name: "big change under the default limit", big: 64 << 10},
		{name: "big change over a lowered limit", limit: 4096, big: 64 << 10, fail: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.rec.MaxPackBytes = tc.limit
			env := &readLog{Env: f.env}
			s := f.session("s", pushSpec("push"))
			if err := f.rec.Baseline(t.Context(), env, s); err != nil {
				t.Fatal(err)
			}
			before := gitCmd(t, f.bare, "for-each-ref")
			f.edit(t)
			if tc.big > 0 {
				f.writeRandom(t, "big.bin", tc.big)
			}
			res := f.rec.Record(t.Context(), env, s, s.Spec.Prompt)
			if res.RecordReason != agentsv1.ReasonChangesRecorded {
				t.Fatalf("record %s (%s), want the change recorded", res.RecordReason, res.RecordMessage)
			}
			checkAgainstGit(t, f.workspace, res.Changes, f.read(t, s, changes.PatchObject))
			if !tc.fail {
				if res.PushReason != agentsv1.ReasonPushed || !env.readPack() {
					t.Fatalf("push %s (%s), pack read %v; want pushed", res.PushReason, res.PushMessage, env.readPack())
				}
				return
			}
			if res.PushReason != agentsv1.ReasonPushFailed || res.Changes.Pushed {
				t.Fatalf("push %s (%s), want PushFailed", res.PushReason, res.PushMessage)
			}
			for _, want := range []string{fmt.Sprintf("limit of %d bytes", tc.limit), "make the change smaller"} {
				if !strings.Contains(res.PushMessage, want) {
					t.Fatalf("message %q does not say %q", res.PushMessage, want)
				}
			}
			if env.readPack() {
				t.Fatal("the pack over the limit was read")
			}
			if after := gitCmd(t, f.bare, "for-each-ref"); after != before {
				t.Fatalf("the server's refs changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// lyingWorkspace makes a workspace whose own wc (first on its PATH, as a
// workspace can arrange) prints answer for the push's pack and is the real
// wc for every other file.
func lyingWorkspace(t *testing.T, f *fixture, answer string) *readLog {
	t.Helper()
	realWC, err := exec.LookPath("wc")
	if err != nil {
		t.Skipf("no wc: %v", err)
	}
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "answer"), []byte(answer), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
case "$(readlink /proc/$$/fd/0)" in
*/agent-operator/pack) cat '%s' ;;
*) exec '%s' "$@" ;;
esac
`, filepath.Join(bin, "answer"), realWC)
	if err := os.WriteFile(filepath.Join(bin, "wc"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			base = append(base, kv)
		}
	}
	base = append(base, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	env, err := localenv.New(f.workspace, localenv.WithBaseEnv(base))
	if err != nil {
		t.Fatal(err)
	}
	return &readLog{Env: env}
}

// A workspace that lies about its pack's size (huge, negative, garbage, too
// small, too big) gets PushFailed with a clear error, never a panic or an
// allocation of what it claims; nothing reaches the remote and the patch
// stays recorded.
func TestRecordPackSizeLies(t *testing.T) {
	tests := []struct {
		name, answer string
		want         string // in the message
		read         bool   // the pack is read (and found to differ)
	}{
		{name: "huge", answer: "1000000000000000000\n", want: "over the operator's limit of 268435456 bytes"},
		{name: "over the limit", answer: "268435457\n", want: "over the operator's limit"},
		{name: "over int64", answer: "99999999999999999999\n", want: "not a byte count"},
		{name: "negative", answer: "-1\n", want: "not a byte count"},
		{name: "garbage", answer: "lots\n", want: "not a byte count"},
		{name: "number with garbage", answer: "12abc\n", want: "not a byte count"},
		{name: "exponent", answer: "1e9\n", want: "not a byte count"},
		{name: "empty", answer: "", want: "not a byte count"},
		{name: "fewer than the pack", answer: "10\n", want: "more bytes than the 10", read: true},
		{name: "more than the pack", answer: "5000000\n", want: "of the 5000000", read: true},
		{name: "more than a chunk", answer: "200000000\n", want: "of the 8388608", read: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			env := lyingWorkspace(t, f, tc.answer)
			s := f.session("s", pushSpec("push"))
			if err := f.rec.Baseline(t.Context(), env, s); err != nil {
				t.Fatal(err)
			}
			before := gitCmd(t, f.bare, "for-each-ref")
			f.edit(t)
			res := f.rec.Record(t.Context(), env, s, s.Spec.Prompt)
			if res.RecordReason != agentsv1.ReasonChangesRecorded {
				t.Fatalf("record %s (%s), want the change recorded", res.RecordReason, res.RecordMessage)
			}
			checkAgainstGit(t, f.workspace, res.Changes, f.read(t, s, changes.PatchObject))
			if res.PushReason != agentsv1.ReasonPushFailed || res.Changes.Pushed {
				t.Fatalf("push %s (%s), want PushFailed", res.PushReason, res.PushMessage)
			}
			if !strings.Contains(res.PushMessage, tc.want) {
				t.Fatalf("message %q does not say %q", res.PushMessage, tc.want)
			}
			if env.readPack() != tc.read {
				t.Fatalf("pack read %v, want %v", env.readPack(), tc.read)
			}
			if after := gitCmd(t, f.bare, "for-each-ref"); after != before {
				t.Fatalf("the server's refs changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}
