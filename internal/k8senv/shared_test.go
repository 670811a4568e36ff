package k8senv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// serveOldExecutor serves the executor protocol on stdin and stdout like
// `executor-sidecar serve --root R --owner-dir D`, as an executor that
// predates call owners: the real server with executor.FeatureCallOwner
// switched off (executor.ServeOptions.WithoutFeatures).
func serveOldExecutor(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	root := fs.String("root", "", "")
	ownerDir := fs.String("owner-dir", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	env, err := localenv.New(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Close()
	err = executor.Serve(context.Background(), os.Stdin, os.Stdout, env, executor.ServeOptions{
		OwnerDir: *ownerDir, WithoutFeatures: []string{executor.FeatureCallOwner},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// oldExecutorConfig makes a pool's sidecar this test binary serving as an
// executor without call owners.
func oldExecutorConfig(t *testing.T) func(*Config) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return func(c *Config) { c.SidecarPath = bin }
}

// sessionOwner is the owner of the i-th session in a pod.
func sessionOwner(i int) executor.Owner {
	return executor.Owner{SessionUID: fmt.Sprintf("uid-%d", i), Holder: "ns-a/ao/ao-1", Epoch: 1}
}

// ownedTarget is the harness pod's target driven by o.
func ownedTarget(h *harness, o executor.Owner) Target {
	t := h.target()
	t.Owner = o
	return t
}

// callAll runs one call on every env at once and returns their errors.
func callAll(t *testing.T, envs []*Env) []error {
	t.Helper()
	errs := make([]error, len(envs))
	var wg sync.WaitGroup
	for i, env := range envs {
		wg.Go(func() { errs[i] = run(t, env) })
	}
	wg.Wait()
	return errs
}

// TestSessionsShareOnePodStream: the sessions of a pod, each with its own
// owner, share one exec stream (one executor process in the pod) and every
// call works; each session's owner is recorded by the sidecar. An env
// expecting what the stream was opened for does not read the pod again;
// one expecting something else reads it once before its first call, and
// one whose expectations the pod does not meet fails alone.
func TestSessionsShareOnePodStream(t *testing.T) {
	const sessions = 50
	h := newHarness(t)
	owners := t.TempDir()
	p := newPool(t, h, func(c *Config) { c.ServeArgs = []string{"--owner-dir", owners} })
	var envs []*Env
	for i := range sessions {
		envs = append(envs, p.Env(ownedTarget(h, sessionOwner(i))))
	}
	for i, err := range callAll(t, envs) {
		if err != nil {
			t.Errorf("session %d: %v", i, err)
		}
	}
	for i, err := range callAll(t, envs) {
		if err != nil {
			t.Errorf("session %d, second call: %v", i, err)
		}
	}
	if n := execStreams(h); n != 1 {
		t.Errorf("%d exec streams for %d sessions, want 1", n, sessions)
	}
	if n := h.podGets.Load(); n != 1 {
		t.Errorf("%d pod GETs, want 1 (the open; every session expects the same)", n)
	}
	for i := range sessions {
		if _, err := os.Stat(owners + "/" + sessionOwner(i).SessionUID); err != nil {
			t.Errorf("owner record of session %d: %v", i, err)
		}
	}

	differs := ownedTarget(h, sessionOwner(sessions))
	differs.Expect = Expect{OwnerUID: "owner-uid"}
	mismatch := ownedTarget(h, sessionOwner(sessions+1))
	mismatch.Expect.OwnerUID = "someone-else"
	if err := run(t, p.Env(differs)); err != nil {
		t.Errorf("a session expecting something else of the pod: %v", err)
	}
	if n := h.podGets.Load(); n != 2 {
		t.Errorf("%d pod GETs, want 2 (the open and the session expecting something else)", n)
	}
	if err := run(t, p.Env(mismatch)); !errors.Is(err, ErrPodMismatch) {
		t.Errorf("a session whose pod this is not = %v, want ErrPodMismatch", err)
	}
	if err := run(t, envs[0]); err != nil {
		t.Errorf("a session after another's pod mismatch: %v", err)
	}
	if n := execStreams(h); n != 1 {
		t.Errorf("%d exec streams at the end, want 1", n)
	}
}

// TestSupersededSessionOnASharedStream: when a newer driver of one session
// uses the pod (here another manager's pool, which only opens its env),
// that session's calls on the shared stream fail with ErrNotOwner naming
// the newer driver, while every other session keeps working on the same,
// still open stream.
func TestSupersededSessionOnASharedStream(t *testing.T) {
	const sessions, superseded = 50, 7
	h := newHarness(t)
	owners := t.TempDir()
	withOwners := func(c *Config) { c.ServeArgs = []string{"--owner-dir", owners} }
	p := newPool(t, h, withOwners)
	var envs []*Env
	for i := range sessions {
		envs = append(envs, p.Env(ownedTarget(h, sessionOwner(i))))
	}
	for i, err := range callAll(t, envs) {
		if err != nil {
			t.Fatalf("session %d before the takeover: %v", i, err)
		}
	}
	envs[0].pc.mu.Lock()
	stream := envs[0].pc.client
	envs[0].pc.mu.Unlock()

	newer := sessionOwner(superseded)
	newer.Holder, newer.Epoch = "ns-b/ao/ao-9", 2
	if err := newPool(t, h, withOwners).Env(ownedTarget(h, newer)).Open(t.Context()); err != nil {
		t.Fatalf("the newer driver's Open: %v", err)
	}
	for round := range 2 {
		for i, err := range callAll(t, envs) {
			var re *executor.RemoteError
			switch {
			case i == superseded && (!errors.Is(err, executor.ErrNotOwner) || !errors.As(err, &re) || re.Owner == nil || *re.Owner != newer):
				t.Errorf("round %d: the superseded session's call = %v, want ErrNotOwner naming %+v", round, err, newer)
			case i != superseded && err != nil:
				t.Errorf("round %d: session %d: %v", round, i, err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Errorf("the shared stream ended: %v", err)
	}
	if n := execStreams(h); n != 2 {
		t.Errorf("%d exec streams, want 2 (one per pool)", n)
	}
}

// TestOldExecutorFallsBackToStreamsPerOwner: against an executor that does
// not announce call owners, sessions with owners get streams of their own
// with the owner in the hello (the shared stream, opened to learn the
// executor's features, serves calls without an owner), and a superseded
// driver is still refused.
func TestOldExecutorFallsBackToStreamsPerOwner(t *testing.T) {
	h := newHarness(t)
	owners := t.TempDir()
	cfg := func(c *Config) {
		oldExecutorConfig(t)(c)
		c.ServeArgs = []string{"--owner-dir", owners}
	}
	p := newPool(t, h, cfg)
	const sessions = 3
	var envs []*Env
	for i := range sessions {
		envs = append(envs, p.Env(ownedTarget(h, sessionOwner(i))))
	}
	envs = append(envs, p.Env(ownedTarget(h, sessionOwner(0)))) // the same owner shares its stream
	unowned := p.Env(h.target())
	for i, err := range callAll(t, append(envs, unowned)) {
		if err != nil {
			t.Errorf("env %d: %v", i, err)
		}
	}
	if envs[0].pc.hello.HasFeature(executor.FeatureCallOwner) {
		t.Fatal("the old executor announces call owners")
	}
	if n := execStreams(h); n != 1+sessions {
		t.Errorf("%d exec streams, want %d (the pod's and one per owner)", n, 1+sessions)
	}
	newer := sessionOwner(1)
	newer.Holder, newer.Epoch = "ns-b/ao/ao-9", 2
	if err := run(t, newPool(t, h, cfg).Env(ownedTarget(h, newer))); err != nil {
		t.Fatalf("the newer driver: %v", err)
	}
	if err := run(t, envs[1]); !errors.Is(err, executor.ErrNotOwner) {
		t.Errorf("the superseded session = %v, want ErrNotOwner", err)
	}
	for _, i := range []int{0, 2} {
		if err := run(t, envs[i]); err != nil {
			t.Errorf("session %d after another's takeover: %v", i, err)
		}
	}
}

// TestSharedStreamCarriesTheOwnerOfEveryOp: every operation of an env with
// an owner is checked against it on the shared stream (the owner travels
// with each call, stdio processes too).
func TestSharedStreamCarriesTheOwnerOfEveryOp(t *testing.T) {
	h := newHarness(t)
	owners := t.TempDir()
	withOwners := func(c *Config) { c.ServeArgs = []string{"--owner-dir", owners} }
	old := sessionOwner(1)
	env := newPool(t, h, withOwners).Env(ownedTarget(h, old))
	if err := env.WriteFile(t.Context(), "f", []byte("x")); err != nil {
		t.Fatal(err)
	}
	newer := old
	newer.Epoch++
	if err := newPool(t, h, withOwners).Env(ownedTarget(h, newer)).Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ops := map[string]func() error{
		"read_file":      func() error { _, err := env.ReadFile(ctx, "f", tool.ReadOptions{}); return err },
		"write_file":     func() error { return env.WriteFile(ctx, "f", []byte("y")) },
		"write_file_if":  func() error { return env.WriteFileIf(ctx, "g", []byte("y"), "") },
		"delete_file":    func() error { return env.DeleteFile(ctx, "f") },
		"file_exists":    func() error { _, err := env.FileExists(ctx, "f"); return err },
		"list_directory": func() error { _, err := env.ListDirectory(ctx, ".", 1); return err },
		"exec":           func() error { _, err := env.ExecCommand(ctx, "true", tool.ExecOptions{}); return err },
		"grep":           func() error { _, err := env.Grep(ctx, "x", ".", tool.GrepOptions{}); return err },
		"glob":           func() error { _, err := env.Glob(ctx, "*", "."); return err },
		"initialize":     func() error { return env.Initialize(ctx) },
		"cleanup":        func() error { return env.Cleanup(ctx) },
		"fetch": func() error {
			_, err := env.Fetch(ctx, tool.FetchRequest{URL: "http://127.0.0.1:1/", AllowPrivate: true})
			return err
		},
		"stdio": func() error {
			s, err := env.StartStdio(ctx, []string{"cat"}, nil, "")
			if err == nil {
				s.Close()
			}
			return err
		},
		"open": func() error { return env.Open(ctx) },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, executor.ErrNotOwner) {
			t.Errorf("%s of the superseded session = %v, want ErrNotOwner", name, err)
		}
	}
	if ok, err := env.pc.pool.Env(h.target()).FileExists(ctx, "f"); !ok || err != nil {
		t.Errorf("the refused calls changed the workspace (f exists: %v, %v)", ok, err)
	}
}

// TestMismatchedFirstSessionDoesNotBlockThePod: the pod's shared stream is
// opened with the expectations of the session opening it, so a session
// whose expectations the pod does not meet, arriving first, fails alone;
// the next session opens the stream and a later one expecting the same does
// not read the pod again.
func TestMismatchedFirstSessionDoesNotBlockThePod(t *testing.T) {
	h := newHarness(t)
	owners := t.TempDir()
	p := newPool(t, h, func(c *Config) { c.ServeArgs = []string{"--owner-dir", owners} })
	wrong := ownedTarget(h, sessionOwner(0))
	wrong.Expect.OwnerUID = "someone-else"
	if err := run(t, p.Env(wrong)); !errors.Is(err, ErrPodMismatch) {
		t.Fatalf("the mismatched session = %v, want ErrPodMismatch", err)
	}
	if n := execStreams(h); n != 0 {
		t.Fatalf("%d exec streams opened for a mismatched session", n)
	}
	for i := 1; i <= 2; i++ {
		if err := run(t, p.Env(ownedTarget(h, sessionOwner(i)))); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
	if n := execStreams(h); n != 1 {
		t.Errorf("%d exec streams, want 1", n)
	}
	if n := h.podGets.Load(); n != 2 {
		t.Errorf("%d pod GETs, want 2 (the refused session's and the open)", n)
	}
}
