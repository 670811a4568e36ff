package changes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/test/gitserver"
)

const (
	testUser     = "pusher"
	testPassword = "s3cret-push-password"
)

// gitCmd runs git in dir and returns its stdout.
func gitCmd(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// fixture is a git server with one repository (over https and over plain
// http), a clone of it as the workspace, and the store.
type fixture struct {
	url       string // the repository's URL (https)
	plainURL  string // the repository's URL over plain http
	bare      string // the bare repository on the server
	workspace string
	env       *localenv.Env
	rec       *changes.Recorder
	pub       *events.Publisher
	secrets   map[string]*corev1.Secret // what rec.Secrets reads
	reqs      *requestLog               // what the servers were asked
}

// request is one request a git server received.
type request struct {
	scheme, path string
	auth         bool // it carried an Authorization header
}

// requestLog is instrumentation, not a stand-in: it notes each request
// before the real git server (test/gitserver) answers it.
type requestLog struct {
	mu   sync.Mutex
	reqs []request
}

func (l *requestLog) wrap(scheme string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, request{scheme: scheme, path: r.URL.Path, auth: r.Header.Get("Authorization") != ""})
		l.mu.Unlock()
		// A repository that moved: /moved.git redirects to /demo.git.
		if rest, ok := strings.CutPrefix(r.URL.Path, "/moved.git/"); ok {
			to := "/demo.git/" + rest
			if r.URL.RawQuery != "" {
				to += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, to, http.StatusMovedPermanently)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (l *requestLog) all() []request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

// gitSecret is a Secret opted in as git credentials, with annotations.
func gitSecret(name, password string, annotations map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Annotations: annotations,
			Labels: map[string]string{agentsv1.LabelGitCredentials: "true"}},
		Data: map[string][]byte{"username": []byte(testUser), "password": []byte(password)},
	}
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	ctx := t.Context()
	root := t.TempDir()
	seed := t.TempDir()
	for name, content := range map[string]string{
		"keep.txt": "unchanged\n", "edit1.txt": "one\ntwo\nthree\n", "edit2.go": "package x\n",
		"gone.txt": "delete me\n", "bin.dat": "\x00\x01\x02",
	} {
		if err := os.WriteFile(filepath.Join(seed, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := gitserver.CreateRepo(ctx, root, "demo", seed); err != nil {
		t.Fatal(err)
	}
	backend, err := gitserver.Backend(ctx)
	if err != nil {
		t.Skipf("no git http-backend: %v", err)
	}
	reqs := &requestLog{}
	h := gitserver.Handler(root, backend, testUser, testPassword)
	srv := httptest.NewTLSServer(reqs.wrap("https", h))
	t.Cleanup(srv.Close)
	plain := httptest.NewServer(reqs.wrap("http", h))
	t.Cleanup(plain.Close)
	ws := filepath.Join(t.TempDir(), "workspace")
	bare := filepath.Join(root, "demo.git")
	cmd := exec.CommandContext(ctx, "git", "clone", "-q", bare, ws)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clone: %v: %s", err, out)
	}
	env, err := localenv.New(ws)
	if err != nil {
		t.Fatal(err)
	}
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	f := &fixture{url: srv.URL + "/demo.git", plainURL: plain.URL + "/demo.git", bare: bare, workspace: ws, env: env, pub: pub,
		reqs: reqs, secrets: map[string]*corev1.Secret{
			"push":  gitSecret("push", testPassword, nil),
			"wrong": gitSecret("wrong", "not-the-password", nil),
		}}
	f.rec = &changes.Recorder{Store: pub.ChangesStore(), Secrets: func(_ context.Context, _, name string) (*corev1.Secret, error) {
		sec, ok := f.secrets[name]
		if !ok {
			return nil, errors.New("not found")
		}
		return sec, nil
	}}
	changes.SetTransport(f.rec, srv.Client().Transport)
	return f
}

func (f *fixture) session(name string, push *agentsv1.GitPush, outputs ...string) *agentsv1.AgentSession {
	return &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID("uid-" + name)},
		Spec: agentsv1.AgentSessionSpec{
			Prompt:  "Fix the parser\nand more details",
			Outputs: outputs,
			Workspace: agentsv1.WorkspaceSpec{Git: &agentsv1.GitSource{
				Repository: f.url, Push: push,
			}},
		},
	}
}

func (f *fixture) write(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(f.workspace, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// edit makes the change of the acceptance scenario: two files edited, one
// added, one deleted.
func (f *fixture) edit(t *testing.T) {
	t.Helper()
	f.write(t, "edit1.txt", "one\nTWO\nthree\nfour\n")
	f.write(t, "edit2.go", "package y\n")
	f.write(t, "dir/new.txt", "new file\n")
	if err := os.Remove(filepath.Join(f.workspace, "gone.txt")); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) read(t *testing.T, s *agentsv1.AgentSession, object string) []byte {
	t.Helper()
	data, err := events.ReadChanges(t.Context(), f.pub.JetStream(), events.SessionRef{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)}, object)
	if err != nil {
		t.Fatalf("ReadChanges %s: %v", object, err)
	}
	return data
}

func pushSpec(secret string) *agentsv1.GitPush {
	return &agentsv1.GitPush{CredentialsSecretRef: &corev1.LocalObjectReference{Name: secret}}
}

// A git workspace: the change is committed on agent/<name>, status.changes
// matches git's numstat, the stored patch is git diff --binary base..branch
// byte for byte, and the branch is pushed to the server.
func TestRecordGitWorkspacePushes(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	s := f.session("fix", pushSpec("push"))
	if err := f.rec.Baseline(ctx, f.env, s); err != nil {
		t.Fatalf("Baseline: %v", err)
	}
	cloned := strings.TrimSpace(gitCmd(t, f.workspace, "rev-parse", "HEAD"))
	f.edit(t)
	res := f.rec.Record(ctx, f.env, s, s.Spec.Prompt)
	if res.RecordReason != agentsv1.ReasonChangesRecorded || res.PushReason != agentsv1.ReasonPushed {
		t.Fatalf("record %s (%s), push %s (%s)", res.RecordReason, res.RecordMessage, res.PushReason, res.PushMessage)
	}
	c := res.Changes
	if c.Base != cloned || c.Head == cloned || c.Branch != "agent/fix" || !c.Pushed {
		t.Fatalf("changes = %+v, want base %s, a new head on agent/fix, pushed", c, cloned)
	}
	// The server's branch is the session's commit, whose parent is the clone.
	if got := strings.TrimSpace(gitCmd(t, f.bare, "rev-parse", "refs/heads/agent/fix")); got != c.Head {
		t.Fatalf("server branch at %s, want %s", got, c.Head)
	}
	if got := strings.TrimSpace(gitCmd(t, f.bare, "rev-parse", "agent/fix^")); got != cloned {
		t.Fatalf("parent of the pushed commit is %s, want the cloned %s", got, cloned)
	}
	msg := gitCmd(t, f.bare, "log", "-1", "--format=%B", "agent/fix")
	if !strings.HasPrefix(msg, "Fix the parser\n") || !strings.Contains(msg, "team-a/fix") {
		t.Fatalf("commit message %q: want the prompt's first line and the session", msg)
	}
	// Numstat and patch as git itself computes them on the server.
	checkAgainstGit(t, f.bare, c, f.read(t, s, changes.PatchObject))
	var stored agentsv1.Changes
	if err := json.Unmarshal(f.read(t, s, changes.SummaryObject), &stored); err != nil || stored.Head != c.Head || !stored.Pushed {
		t.Fatalf("stored summary %+v (%v), want head %s pushed", stored, err, c.Head)
	}
	// The reading by name alone finds the newest incarnation.
	byName, err := events.ReadChanges(ctx, f.pub.JetStream(), events.SessionRef{Namespace: s.Namespace, Name: s.Name}, changes.PatchObject)
	if err != nil || !bytes.Equal(byName, f.read(t, s, changes.PatchObject)) {
		t.Fatalf("ReadChanges by name: %v", err)
	}

	// A follow-up adds a second commit on the same branch.
	f.write(t, "edit1.txt", "again\n")
	res2 := f.rec.Record(ctx, f.env, s, "follow-up")
	if res2.PushReason != agentsv1.ReasonPushed {
		t.Fatalf("second push %s: %s", res2.PushReason, res2.PushMessage)
	}
	if got := strings.TrimSpace(gitCmd(t, f.bare, "rev-parse", "agent/fix^")); got != c.Head {
		t.Fatalf("second commit's parent %s, want the first %s", got, c.Head)
	}
	if res2.Changes.Base != cloned {
		t.Fatalf("second recording's base %s, want the clone %s", res2.Changes.Base, cloned)
	}
	checkAgainstGit(t, f.bare, res2.Changes, f.read(t, s, changes.PatchObject))
}

// checkAgainstGit compares c and patch with what git computes in repo.
func checkAgainstGit(t *testing.T, repo string, c *agentsv1.Changes, patch []byte) {
	t.Helper()
	want := gitCmd(t, repo, "diff", "--binary", "--full-index", "--no-renames", c.Base, c.Head)
	if string(patch) != want {
		t.Fatalf("stored patch differs from git diff:\n%s\nwant:\n%s", patch, want)
	}
	var files, ins, del int64
	for line := range strings.SplitSeq(strings.TrimSpace(gitCmd(t, repo, "diff", "--numstat", "--no-renames", c.Base, c.Head)), "\n") {
		parts := strings.Split(line, "\t")
		files++
		var a, d int64
		if parts[0] != "-" {
			a, _ = strconv.ParseInt(parts[0], 10, 64)
			d, _ = strconv.ParseInt(parts[1], 10, 64)
		}
		ins, del = ins+a, del+d
		found := false
		for _, f := range c.Files {
			if f.Path == parts[2] && f.Insertions == a && f.Deletions == d {
				found = true
			}
		}
		if !found {
			t.Fatalf("numstat line %q not in status files %+v", line, c.Files)
		}
	}
	if c.FilesChanged != files || c.Insertions != ins || c.Deletions != del {
		t.Fatalf("changes %d files +%d -%d, git says %d +%d -%d", c.FilesChanged, c.Insertions, c.Deletions, files, ins, del)
	}
}

// Pushing fails cleanly: wrong credentials, a diverged remote branch without
// force, and pushing to the cloned branch implicitly. The change stays
// stored, and no message holds the password.
func TestRecordPushFailures(t *testing.T) {
	tests := []struct {
		name    string
		push    *agentsv1.GitPush
		ref     string
		prepare func(t *testing.T, f *fixture)
		want    string // in the message
	}{
		{name: "wrong credentials", push: pushSpec("wrong"), want: "authentication"},
		{name: "missing secret", push: pushSpec("absent"), want: "absent"},
		{name: "diverged without force", push: pushSpec("push"), want: "force",
			prepare: func(t *testing.T, f *fixture) {
				gitCmd(t, f.bare, "branch", "agent/s", "main")
				tmp := filepath.Join(t.TempDir(), "c")
				gitCmd(t, t.TempDir(), "clone", "-q", "-b", "agent/s", f.bare, tmp)
				if err := os.WriteFile(filepath.Join(tmp, "other.txt"), []byte("x\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				gitCmd(t, tmp, "add", "-A")
				gitCmd(t, tmp, "commit", "-q", "-m", "someone else")
				gitCmd(t, tmp, "push", "-q", "origin", "agent/s")
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			s := f.session("s", tc.push)
			if err := f.rec.Baseline(t.Context(), f.env, s); err != nil {
				t.Fatal(err)
			}
			if tc.prepare != nil {
				tc.prepare(t, f)
			}
			before := gitCmd(t, f.bare, "for-each-ref")
			f.edit(t)
			res := f.rec.Record(t.Context(), f.env, s, s.Spec.Prompt)
			if res.PushReason != agentsv1.ReasonPushFailed || res.Changes == nil || res.Changes.Pushed {
				t.Fatalf("push %s (%s), want PushFailed", res.PushReason, res.PushMessage)
			}
			if !strings.Contains(strings.ToLower(res.PushMessage), tc.want) {
				t.Fatalf("message %q does not say %q", res.PushMessage, tc.want)
			}
			if strings.Contains(res.PushMessage, testPassword) || strings.Contains(res.RecordMessage, testPassword) {
				t.Fatalf("message leaks the password: %q", res.PushMessage)
			}
			if after := gitCmd(t, f.bare, "for-each-ref"); after != before {
				t.Fatalf("the server's refs changed:\n%s\nwas:\n%s", after, before)
			}
			// The change is stored all the same.
			checkAgainstGit(t, f.workspace, res.Changes, f.read(t, s, changes.PatchObject))
		})
	}
}

// force overwrites a diverged remote branch.
func TestRecordForcePush(t *testing.T) {
	f := newFixture(t)
	p := pushSpec("push")
	p.Force, p.Branch = true, "main"
	s := f.session("s", p)
	if err := f.rec.Baseline(t.Context(), f.env, s); err != nil {
		t.Fatal(err)
	}
	f.edit(t)
	res := f.rec.Record(t.Context(), f.env, s, s.Spec.Prompt)
	if res.PushReason != agentsv1.ReasonPushed {
		t.Fatalf("push %s: %s", res.PushReason, res.PushMessage)
	}
	if got := strings.TrimSpace(gitCmd(t, f.bare, "rev-parse", "main")); got != res.Changes.Head {
		t.Fatalf("main at %s, want %s (explicitly named branch)", got, res.Changes.Head)
	}
}

// The cloned branch is refused unless named explicitly.
func TestRecordRefusesClonedBranchImplicitly(t *testing.T) {
	f := newFixture(t)
	s := f.session("main", pushSpec("push"))
	s.Name = "x"
	s.Spec.Workspace.Git.Ref = "agent/x" // the session cloned the branch its default names
	gitCmd(t, f.bare, "branch", "agent/x", "main")
	if err := f.rec.Baseline(t.Context(), f.env, s); err != nil {
		t.Fatal(err)
	}
	before := gitCmd(t, f.bare, "for-each-ref")
	f.edit(t)
	res := f.rec.Record(t.Context(), f.env, s, s.Spec.Prompt)
	if res.PushReason != agentsv1.ReasonPushFailed || !strings.Contains(res.PushMessage, "cloned") {
		t.Fatalf("push %s (%s), want PushFailed about the cloned branch", res.PushReason, res.PushMessage)
	}
	if after := gitCmd(t, f.bare, "for-each-ref"); after != before {
		t.Fatal("the server's refs changed")
	}
}

// No edits: NothingToPush, nothing pushed, head equals base.
func TestRecordNothingToPush(t *testing.T) {
	f := newFixture(t)
	s := f.session("idle", pushSpec("push"))
	if err := f.rec.Baseline(t.Context(), f.env, s); err != nil {
		t.Fatal(err)
	}
	res := f.rec.Record(t.Context(), f.env, s, s.Spec.Prompt)
	if res.PushReason != agentsv1.ReasonNothingToPush || res.Changes.Head != res.Changes.Base || res.Changes.FilesChanged != 0 {
		t.Fatalf("push %s, changes %+v; want NothingToPush with head == base", res.PushReason, res.Changes)
	}
	if out := gitCmd(t, f.bare, "for-each-ref", "refs/heads/agent"); out != "" {
		t.Fatalf("a branch was pushed: %s", out)
	}
}

// A workspace that is not a git repository: the baseline is a commit in the
// operator's private git directory, and the patch recreates the change.
func TestRecordPlainWorkspace(t *testing.T) {
	ws := t.TempDir()
	for name, content := range map[string]string{"a.txt": "a\n", "b.txt": "b\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	orig := t.TempDir()
	if err := os.CopyFS(orig, os.DirFS(ws)); err != nil {
		t.Fatal(err)
	}
	env, err := localenv.New(ws)
	if err != nil {
		t.Fatal(err)
	}
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	rec := &changes.Recorder{Store: pub.ChangesStore()}
	s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain", UID: "u1"},
		Spec: agentsv1.AgentSessionSpec{Prompt: "p"}}
	if err := rec.Baseline(t.Context(), env, s); err != nil {
		t.Fatalf("Baseline: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ws, "b.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "c.bin"), []byte{0, 1, 2, 255}, 0o644); err != nil {
		t.Fatal(err)
	}
	res := rec.Record(t.Context(), env, s, "p")
	if res.RecordReason != agentsv1.ReasonChangesRecorded {
		t.Fatalf("record %s: %s", res.RecordReason, res.RecordMessage)
	}
	if res.Changes.FilesChanged != 3 || res.Changes.Branch != "" {
		t.Fatalf("changes %+v: want 3 files and no branch", res.Changes)
	}
	for _, f := range res.Changes.Files {
		if strings.HasPrefix(f.Path, ".agent-operator") {
			t.Fatalf("the private git directory is part of the change: %+v", f)
		}
	}
	// The patch applied to the original reproduces the workspace.
	patch, err := events.ReadChanges(t.Context(), pub.JetStream(), events.SessionRef{Namespace: "ns", Name: "plain", UID: "u1"}, changes.PatchObject)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "git", "apply", "--binary", "-")
	cmd.Dir, cmd.Stdin = orig, bytes.NewReader(patch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v: %s", err, out)
	}
	for _, name := range []string{"a.txt", "c.bin"} {
		want, _ := os.ReadFile(filepath.Join(ws, name))
		got, err := os.ReadFile(filepath.Join(orig, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s after applying the patch: %q (%v), want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(orig, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("b.txt still exists after applying the patch: %v", err)
	}
}

// spec.outputs: matching files are stored, a file over the limit is
// skipped and named, and nothing else is lost.
func TestRecordArtifacts(t *testing.T) {
	f := newFixture(t)
	s := f.session("art", nil, "out/*.txt", "report.md")
	if err := f.rec.Baseline(t.Context(), f.env, s); err != nil {
		t.Fatal(err)
	}
	f.write(t, "out/a.txt", "artifact a\n")
	f.write(t, "out/big.txt", strings.Repeat("x", agentsv1.MaxArtifactBytes+1))
	f.write(t, "report.md", "# report\n")
	f.write(t, "out/ignored.log", "no\n")
	res := f.rec.Record(t.Context(), f.env, s, "p")
	if res.RecordReason != agentsv1.ReasonArtifactsSkipped || !strings.Contains(res.RecordMessage, "out/big.txt") {
		t.Fatalf("record %s (%s), want ArtifactsSkipped naming out/big.txt", res.RecordReason, res.RecordMessage)
	}
	if res.Changes.Artifacts != 2 || len(res.Changes.SkippedArtifacts) != 1 {
		t.Fatalf("artifacts %d, skipped %v; want 2 and 1", res.Changes.Artifacts, res.Changes.SkippedArtifacts)
	}
	if got := string(f.read(t, s, changes.ArtifactPrefix+"out/a.txt")); got != "artifact a\n" {
		t.Fatalf("artifact out/a.txt = %q", got)
	}
	var list []string
	if err := json.Unmarshal(f.read(t, s, changes.ArtifactsObject), &list); err != nil || strings.Join(list, ",") != "out/a.txt,report.md" {
		t.Fatalf("artifact list %v (%v)", list, err)
	}
	if _, err := events.ReadChanges(t.Context(), f.pub.JetStream(), events.SessionRef{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)},
		changes.ArtifactPrefix+"out/big.txt"); !errors.Is(err, events.ErrNoChanges) {
		t.Fatalf("the skipped artifact was stored: %v", err)
	}
	// The patch is stored all the same.
	checkAgainstGit(t, f.workspace, res.Changes, f.read(t, s, changes.PatchObject))
}
