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

// The push credentials' annotation changes.AnnotationAllowedBaseURLs
// limits the remotes they are sent to, with the matching of LLM API keys
// (scheme, host and port equal, path equal or under); without it they go to
// any https:// remote but never in clear text to an http:// one. A remote
// the Secret may not reach ends PushFailed naming the Secret, the
// annotation and the remote (without its user information), and the
// server sees no request carrying credentials outside what is allowed (for
// a refused remote, no request at all).
func TestRecordPushAllowedURLs(t *testing.T) {
	const userinfoPassword = "hunter2-in-the-url"
	type urls struct{ https, plain, origin string } // the fixture's
	tests := []struct {
		name     string
		remote   func(u urls) string            // push.remote (empty: the clone URL)
		allowed  func(u urls) string            // the annotation (nil: absent)
		unlabel  bool                           // the Secret lacks the opt-in label
		authOK   string                         // path prefix every authenticated request has
		pushed   bool                           // the branch reaches the server
		want     func(u urls) []string          // in the message
		requests bool                           // the server sees requests
		extra    func(t *testing.T, msg string) // further checks of the message
	}{
		{name: "annotation absent", pushed: true, requests: true, authOK: "/demo.git/"},
		{name: "annotation lists the remote", pushed: true, requests: true, authOK: "/demo.git/",
			allowed: func(u urls) string { return u.https }},
		{name: "annotation lists the host among others", pushed: true, requests: true, authOK: "/demo.git/",
			allowed: func(u urls) string { return "https://github.com/org/,\n " + u.origin + "/ https://example.com" }},
		{name: "annotation lists another host",
			allowed: func(u urls) string { return "https://github.com/org/" },
			want: func(u urls) []string {
				return []string{"Secret push", changes.AnnotationAllowedBaseURLs, u.https, "https://github.com/org/", "nothing was sent"}
			}},
		{name: "annotation lists another path on the host",
			allowed: func(u urls) string { return u.origin + "/other.git" },
			want: func(u urls) []string {
				return []string{"push", changes.AnnotationAllowedBaseURLs, u.https, "/other.git"}
			}},
		{name: "annotation lists a prefix of the name, not a parent path",
			allowed: func(u urls) string { return u.origin + "/demo" },
			want:    func(u urls) []string { return []string{changes.AnnotationAllowedBaseURLs, u.https} }},
		{name: "annotation lists the https remote, the push names http",
			remote:  func(u urls) string { return u.plain },
			allowed: func(u urls) string { return u.https },
			want:    func(u urls) []string { return []string{changes.AnnotationAllowedBaseURLs, u.plain} }},
		{name: "http remote without the annotation", pushed: true, requests: true, authOK: "/demo.git/", // as for LLM keys
			remote: func(u urls) string { return u.plain }},
		{name: "http remote listed", pushed: true, requests: true, authOK: "/demo.git/",
			remote:  func(u urls) string { return u.plain },
			allowed: func(u urls) string { return u.plain }},
		{name: "remote with user information",
			remote: func(u urls) string {
				return strings.Replace(u.https, "https://", "https://someone:"+userinfoPassword+"@", 1)
			},
			allowed: func(u urls) string { return u.https },
			want:    func(u urls) []string { return []string{changes.AnnotationAllowedBaseURLs, u.https} },
			extra: func(t *testing.T, msg string) {
				if strings.Contains(msg, userinfoPassword) {
					t.Fatalf("message leaks the remote's user information: %q", msg)
				}
			}},
		{name: "allowed remote redirects outside the allowed path", requests: true, authOK: "/moved.git/",
			remote:  func(u urls) string { return u.origin + "/moved.git" },
			allowed: func(u urls) string { return u.origin + "/moved.git" },
			want:    func(u urls) []string { return []string{"redirect", "/demo.git", changes.AnnotationAllowedBaseURLs} }},
		{name: "not labelled", unlabel: true,
			want: func(u urls) []string { return []string{"not opted in", agentsv1.LabelGitCredentials} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			u := urls{https: f.url, plain: f.plainURL, origin: strings.TrimSuffix(f.url, "/demo.git")}
			sec := f.secrets["push"]
			if tc.allowed != nil {
				sec.Annotations = map[string]string{changes.AnnotationAllowedBaseURLs: tc.allowed(u)}
			}
			if tc.unlabel {
				sec.Labels = nil
			}
			p := pushSpec("push")
			if tc.remote != nil {
				p.Remote = tc.remote(u)
			}
			s := f.session("s", p)
			if err := f.rec.Baseline(t.Context(), f.env, s); err != nil {
				t.Fatal(err)
			}
			before := gitCmd(t, f.bare, "for-each-ref")
			f.edit(t)
			res := f.rec.Record(t.Context(), f.env, s, s.Spec.Prompt)
			if res.RecordReason != agentsv1.ReasonChangesRecorded {
				t.Fatalf("record %s (%s), want the change recorded", res.RecordReason, res.RecordMessage)
			}
			reqs := f.reqs.all()
			for _, r := range reqs {
				if r.auth && (tc.authOK == "" || !strings.HasPrefix(r.path, tc.authOK)) {
					t.Errorf("credentials sent to %s %s, want them only under %q", r.scheme, r.path, tc.authOK)
				}
			}
			if (len(reqs) > 0) != tc.requests {
				t.Errorf("the server saw %d requests (%v), want requests %v", len(reqs), reqs, tc.requests)
			}
			if tc.pushed {
				if res.PushReason != agentsv1.ReasonPushed || !res.Changes.Pushed {
					t.Fatalf("push %s (%s), want Pushed", res.PushReason, res.PushMessage)
				}
				if got := strings.TrimSpace(gitCmd(t, f.bare, "rev-parse", "refs/heads/agent/s")); got != res.Changes.Head {
					t.Fatalf("server branch at %s, want %s", got, res.Changes.Head)
				}
				return
			}
			if res.PushReason != agentsv1.ReasonPushFailed || res.Changes.Pushed {
				t.Fatalf("push %s (%s), want PushFailed", res.PushReason, res.PushMessage)
			}
			for _, w := range tc.want(u) {
				if !strings.Contains(res.PushMessage, w) {
					t.Errorf("message %q does not say %q", res.PushMessage, w)
				}
			}
			if strings.Contains(res.PushMessage, testPassword) {
				t.Errorf("message leaks the password: %q", res.PushMessage)
			}
			if tc.extra != nil {
				tc.extra(t, res.PushMessage)
			}
			if after := gitCmd(t, f.bare, "for-each-ref"); after != before {
				t.Fatalf("the server's refs changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}
