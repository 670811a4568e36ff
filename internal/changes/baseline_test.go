package changes_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// countingEnv is instrumentation, not a stand-in: every method delegates to
// a real localenv.Env (real files, real processes, real git). It counts the
// calls that are a round trip to the executor in a workspace pod: all but
// WorkingDirectory, Platform and OSVersion, which the executor client
// answers from its handshake.
type countingEnv struct {
	env   *localenv.Env
	calls atomic.Int64
	// trace, if set, is the file git's own trace (GIT_TRACE) of every
	// command run goes to: one line per git process ("built-in: git ...").
	trace string
}

var _ tool.ExecutionEnvironment = (*countingEnv)(nil)

func (c *countingEnv) ReadFile(ctx context.Context, p string, o tool.ReadOptions) (*tool.FileContent, error) {
	c.calls.Add(1)
	return c.env.ReadFile(ctx, p, o)
}

func (c *countingEnv) WriteFile(ctx context.Context, p string, content []byte) error {
	c.calls.Add(1)
	return c.env.WriteFile(ctx, p, content)
}

func (c *countingEnv) DeleteFile(ctx context.Context, p string) error {
	c.calls.Add(1)
	return c.env.DeleteFile(ctx, p)
}

func (c *countingEnv) FileExists(ctx context.Context, p string) (bool, error) {
	c.calls.Add(1)
	return c.env.FileExists(ctx, p)
}

func (c *countingEnv) ListDirectory(ctx context.Context, p string, depth int) ([]tool.DirEntry, error) {
	c.calls.Add(1)
	return c.env.ListDirectory(ctx, p, depth)
}

func (c *countingEnv) ExecCommand(ctx context.Context, command string, o tool.ExecOptions) (*tool.ExecResult, error) {
	c.calls.Add(1)
	if c.trace != "" {
		o.Env = maps.Clone(o.Env)
		if o.Env == nil {
			o.Env = map[string]string{}
		}
		o.Env["GIT_TRACE"] = c.trace
	}
	return c.env.ExecCommand(ctx, command, o)
}

// gitProcesses counts the git processes c's trace recorded.
func (c *countingEnv) gitProcesses(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(c.trace)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "built-in: git ")
}

func (c *countingEnv) Grep(ctx context.Context, pattern, p string, o tool.GrepOptions) (*tool.GrepResult, error) {
	c.calls.Add(1)
	return c.env.Grep(ctx, pattern, p, o)
}

func (c *countingEnv) Glob(ctx context.Context, pattern, p string) ([]string, error) {
	c.calls.Add(1)
	return c.env.Glob(ctx, pattern, p)
}

func (c *countingEnv) Initialize(ctx context.Context) error {
	c.calls.Add(1)
	return c.env.Initialize(ctx)
}

func (c *countingEnv) Cleanup(ctx context.Context) error {
	c.calls.Add(1)
	return c.env.Cleanup(ctx)
}

func (c *countingEnv) WorkingDirectory() string { return c.env.WorkingDirectory() }
func (c *countingEnv) Platform() string         { return c.env.Platform() }
func (c *countingEnv) OSVersion() string        { return c.env.OSVersion() }

// baselineFiles are the files of the workspaces of the baseline tests.
var baselineFiles = map[string]string{"a.txt": "a\n", "dir/b.txt": "b\n", "it's quoted.txt": "q\n"}

// baselineWorkspace makes a workspace holding baselineFiles; with git, a
// repository with them committed and then an uncommitted edit of a.txt.
func baselineWorkspace(t testing.TB, git bool) string {
	t.Helper()
	ws := t.TempDir()
	for name, content := range baselineFiles {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if git {
		gitCmd(t, ws, "init", "-q")
		gitCmd(t, ws, "add", "-A")
		gitCmd(t, ws, "commit", "-q", "-m", "cloned")
		if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("edited\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

func baselineSession(name string) *agentsv1.AgentSession {
	return &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-" + name)}}
}

// Baseline is one round trip to the workspace in each common case, so a
// warm start does not wait for one per git command (issue 24).
func TestBaselineIsOneRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		git   bool
		again bool // count the second call, after a first one recorded the baseline
		// podStart runs the workspace container's postStart hook first
		// (PodStartCommand), as the kubelet does before the pod is Ready.
		podStart bool
		// gits is how many git processes the script runs: on a fresh
		// workspace, none asks for a baseline that cannot exist yet, and
		// the commit starts no "git maintenance".
		gits int
	}{
		{name: "fresh non-git workspace", gits: 5},
		{name: "git workspace with a checked-out commit", git: true, gits: 3},
		{name: "baseline already recorded, non-git", again: true, gits: 1},
		{name: "baseline already recorded, git", git: true, again: true, gits: 1},
		{name: "recorded at the pod's start, non-git", podStart: true, gits: 1},
		{name: "recorded at the pod's start, git", git: true, podStart: true, gits: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := baselineWorkspace(t, tc.git)
			env, err := localenv.New(ws)
			if err != nil {
				t.Fatal(err)
			}
			rec := &changes.Recorder{}
			s := baselineSession("rt")
			if tc.podStart {
				runPodStart(t, ws)
			}
			if tc.again {
				if err := rec.Baseline(t.Context(), env, s); err != nil {
					t.Fatalf("first Baseline: %v", err)
				}
			}
			c := &countingEnv{env: env, trace: filepath.Join(t.TempDir(), "git-trace")}
			if err := rec.Baseline(t.Context(), c, s); err != nil {
				t.Fatalf("Baseline: %v", err)
			}
			if n := c.calls.Load(); n != 1 {
				t.Fatalf("Baseline made %d round trips to the workspace, want 1", n)
			}
			if n := c.gitProcesses(t); n != tc.gits {
				t.Errorf("Baseline ran %d git processes, want %d", n, tc.gits)
			}
		})
	}
}

// The baseline ref is the checked-out commit of a git workspace, a commit
// of the whole workspace (without the private git directory) otherwise,
// and a second call keeps it; with bash and with a plain POSIX sh.
func TestBaselineRef(t *testing.T) {
	const private = "--git-dir=.agent-operator/git"
	tests := []struct {
		name string
		git  bool
		// change runs between two Baseline calls (nil: one call only).
		change func(t *testing.T, ws string)
	}{
		{name: "git workspace", git: true},
		{name: "non-git workspace"},
		{name: "second call, git workspace", git: true, change: func(t *testing.T, ws string) {
			gitCmd(t, ws, "commit", "-q", "-a", "-m", "later")
		}},
		{name: "second call, non-git workspace", change: func(t *testing.T, ws string) {
			if err := os.WriteFile(filepath.Join(ws, "later.txt"), []byte("later\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, shell := range []string{"/bin/bash", "/bin/sh"} {
		if _, err := os.Stat(shell); err != nil {
			t.Logf("no %s: %v", shell, err)
			continue
		}
		for _, tc := range tests {
			t.Run(filepath.Base(shell)+"/"+tc.name, func(t *testing.T) {
				ws := baselineWorkspace(t, tc.git)
				env, err := localenv.New(ws, localenv.WithShell(shell))
				if err != nil {
					t.Fatal(err)
				}
				rec := &changes.Recorder{}
				s := baselineSession("base")
				if err := rec.Baseline(t.Context(), env, s); err != nil {
					t.Fatalf("Baseline: %v", err)
				}
				dir := private
				if tc.git {
					dir = "--git-dir=.git"
				}
				ref := func() string {
					return strings.TrimSpace(gitCmd(t, ws, dir, "rev-parse", "--verify", "refs/agent-operator/base^{commit}"))
				}
				base := ref()
				if tc.git {
					if head := strings.TrimSpace(gitCmd(t, ws, "rev-parse", "HEAD")); base != head {
						t.Fatalf("base %s, want the checked-out HEAD %s", base, head)
					}
				} else {
					want := slices.Sorted(maps.Keys(baselineFiles))
					got := strings.Split(strings.TrimSuffix(gitCmd(t, ws, dir, "ls-tree", "-r", "-z", "--name-only", base), "\x00"), "\x00")
					slices.Sort(got)
					if !slices.Equal(got, want) {
						t.Fatalf("baseline commit holds %q, want the workspace %q (no .agent-operator)", got, want)
					}
					for name, content := range baselineFiles {
						if got := gitCmd(t, ws, dir, "show", base+":"+name); got != content {
							t.Fatalf("%s at the baseline = %q, want %q", name, got, content)
						}
					}
					if who := gitCmd(t, ws, dir, "log", "-1", "--format=%an <%ae>|%cn|%s", base); who != "agent-operator <agent-operator@localhost>|agent-operator|agent-operator: workspace of base at start\n" {
						t.Fatalf("baseline commit by/message %q", who)
					}
				}
				if tc.change == nil {
					return
				}
				tc.change(t, ws)
				if err := rec.Baseline(t.Context(), env, s); err != nil {
					t.Fatalf("second Baseline: %v", err)
				}
				if again := ref(); again != base {
					t.Fatalf("second call moved the baseline from %s to %s", base, again)
				}
				if !tc.git {
					if head := strings.TrimSpace(gitCmd(t, ws, dir, "rev-parse", "HEAD")); head != base {
						t.Fatalf("second call committed again: HEAD %s, base %s", head, base)
					}
				}
			})
		}
	}
}

// A failed step makes an error that says which and why: a git workspace
// without a commit has no baseline; a file where the private git directory
// goes fails its creation.
func TestBaselineFailures(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, ws string)
		want    []string // in the error
	}{
		{name: "git workspace without a commit", want: []string{"no commit checked out"},
			prepare: func(t *testing.T, ws string) { gitCmd(t, ws, "init", "-q") }},
		{name: "private directory blocked", want: []string{"git init", "exit code 1", "mkdir"},
			prepare: func(t *testing.T, ws string) {
				if err := os.WriteFile(filepath.Join(ws, ".agent-operator"), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			tc.prepare(t, ws)
			env, err := localenv.New(ws)
			if err != nil {
				t.Fatal(err)
			}
			err = (&changes.Recorder{}).Baseline(t.Context(), env, baselineSession("bad"))
			if err == nil {
				t.Fatal("Baseline succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Baseline = %q, want it to say %q", err, w)
				}
			}
			t.Log(err)
		})
	}
}

// runPodStart runs the workspace container's postStart hook in ws the way
// the kubelet does (its command, with the executor binary left out: its
// best-effort mode is tested with the binary) and fails the test if the
// script fails.
func runPodStart(t *testing.T, ws string) {
	t.Helper()
	argv := changes.PodStartCommand("/agent/bin/executor-sidecar", ws)
	i := slices.Index(argv, "--")
	if argv[0] != "/agent/bin/executor-sidecar" || argv[1] != "best-effort" || i < 0 {
		t.Fatalf("PodStartCommand = %q, want the executor's best-effort mode", argv)
	}
	cmd := exec.Command(argv[i+1], argv[i+2:]...)
	cmd.Dir = "/" // the script goes to the workspace itself
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the postStart script: %v: %s", err, out)
	}
}

// The baseline recorded at the pod's start is the workspace as it was
// then, in a commit by the operator; the hook run again (the container
// restarted, or a new pod on the same PVC, after the agent worked) and the
// session's Baseline both keep it, so the work stays in the change.
func TestPodStartRecordsTheBaseline(t *testing.T) {
	ws := baselineWorkspace(t, false)
	runPodStart(t, ws)
	if err := os.WriteFile(filepath.Join(ws, "later.txt"), []byte("after the pod's start\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runPodStart(t, ws) // a restart
	env, err := localenv.New(ws)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&changes.Recorder{}).Baseline(t.Context(), env, baselineSession("pod-start")); err != nil {
		t.Fatal(err)
	}
	const dir = "--git-dir=.agent-operator/git"
	if who := gitCmd(t, ws, dir, "log", "-1", "--format=%an <%ae>|%s", "refs/agent-operator/base"); who != "agent-operator <agent-operator@localhost>|agent-operator: workspace at its pod's start\n" {
		t.Errorf("base commit %q, want the operator's commit of the pod's start", who)
	}
	if files := gitCmd(t, ws, dir, "ls-tree", "-r", "--name-only", "refs/agent-operator/base"); strings.Contains(files, "later.txt") || !strings.Contains(files, "dir/b.txt") {
		t.Errorf("base commit holds %q: want the workspace at the pod's start", files)
	}
}
