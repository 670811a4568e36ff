package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// pipeConn joins the client ends of two pipes.
type pipeConn struct {
	*io.PipeReader
	*io.PipeWriter
}

func (c pipeConn) Close() error { c.PipeWriter.Close(); return c.PipeReader.Close() }

// servedExecutor serves a local environment over root through the real
// executor protocol (one serve "process" of a pod whose owner records are
// in owners) and returns a client presenting o.
func servedExecutor(t *testing.T, root, owners string, o executor.Owner) (*executor.Client, error) {
	t.Helper()
	env, err := localenv.New(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	go func() {
		_ = executor.Serve(context.Background(), sr, sw, env, executor.ServeOptions{OwnerDir: owners})
		sw.Close()
	}()
	c, err := executor.NewClientContext(t.Context(), pipeConn{cr, cw}, executor.WithOwner(o))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// TestSupersededRunnerStopsAtOnce: while the runner's first tool runs, a
// newer driver of the session uses the workspace. The runner's next tool
// call is refused by the executor: the runner stops at once, detached (the
// session is neither failed nor aborted, the refused command never ran, no
// further model call), and tells the controller to leave the session to
// the newer driver for a claim's duration.
func TestSupersededRunnerStopsAtOnce(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{AckTimeout: 300 * time.Millisecond})
	dir, owners := t.TempDir(), t.TempDir()
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	script := &scripted.Script{Turns: []scripted.Turn{
		{Text: "Waiting for the gate.", ToolCalls: []scripted.ToolCall{{Name: "shell",
			Arguments: []byte(`{"command": "cat gate >/dev/null && echo ran >> runs.log"}`)}}},
		{Text: "Once more.", ToolCalls: []scripted.ToolCall{{Name: "shell",
			Arguments: []byte(`{"command": "echo stale >> runs.log"}`)}}},
		{Text: "done"},
	}}
	model := &modelCalls{Client: scripted.New(script, "demo")}
	obj := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "superseded", UID: types.UID("uid-superseded")},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "wait for the gate",
			Model:  agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo"},
		},
	}
	// This runner has no claims (Driver{}); the factory stands in for one
	// that holds the session's claim at epoch 3.
	mine := executor.Owner{SessionUID: string(obj.UID), Holder: "ns-a/ao/ao-1", Epoch: 3}
	var mu sync.Mutex
	var drivers []Driver
	r, err := New(Options{
		Reader:   noObjects{},
		Journals: pub,
		Clients:  func(context.Context, ClientConfig) (loop.Client, error) { return model, nil },
		Envs: func(_ context.Context, _ *agentsv1.AgentSession, _ string, d Driver) (tool.ExecutionEnvironment, error) {
			mu.Lock()
			drivers = append(drivers, d)
			mu.Unlock()
			return servedExecutor(t, dir, owners, mine)
		},
		NotifyInterval: 10 * time.Millisecond,
		Log:            logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtCleanup(t, r)
	if err := r.Ensure(obj, "pod"); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(gate, os.O_WRONLY, 0) // returns once the first tool runs
	if err != nil {
		t.Fatal(err)
	}

	// The takeover: a newer driver's stream to the same pod.
	newer := executor.Owner{SessionUID: string(obj.UID), Holder: "ns-b/ao/ao-9", Epoch: 4}
	nc, err := servedExecutor(t, t.TempDir(), owners, newer)
	if err != nil {
		t.Fatalf("the newer driver: %v", err)
	}
	if _, err := nc.FileExists(t.Context(), "."); err != nil {
		t.Fatalf("the newer driver's call: %v", err)
	}
	if _, err := w.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()

	end := waitProgress(t, r, obj.UID, "the superseded runner ended", func(p Progress) bool { return p.Done })
	if end.Phase == agentsv1.PhaseFailed || end.Phase == agentsv1.PhaseAborted || end.Phase == agentsv1.PhaseSucceeded {
		t.Errorf("the superseded runner set phase %s (%s): the newer driver owns the session", end.Phase, end.Error)
	}
	if !strings.Contains(end.Foreign, `"ns-b/ao/ao-9" (claim epoch 4)`) || !end.ForeignUntil.After(time.Now()) {
		t.Errorf("Foreign %q until %s, want the newer driver for a claim's duration", end.Foreign, end.ForeignUntil)
	}
	if n := model.calls.Load(); n != 2 {
		t.Errorf("%d model calls, want 2: the runner went on after the refusal", n)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "runs.log")); err != nil || string(b) != "ran\n" {
		t.Errorf("runs.log = %q, %v; want only the call made before the takeover", b, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(drivers) != 1 || drivers[0] != (Driver{}) {
		t.Errorf("drivers passed to the factory = %+v, want one zero Driver (no claims)", drivers)
	}
	// The refusal is what the executor says, through the stream.
	if _, err := servedExecutor(t, dir, owners, mine); !errors.Is(err, executor.ErrNotOwner) {
		t.Errorf("a new stream of the superseded driver = %v, want ErrNotOwner", err)
	}
}

func TestDriverOfAClaim(t *testing.T) {
	me := claim.Holder{Install: "ns-a/ao", Pod: "ao-1"}
	tests := []struct {
		name string
		cl   *claim.Claim
		want Driver
	}{
		{"no claims: unchecked", nil, Driver{}},
		{"a created claim", &claim.Claim{Fence: 0}, Driver{Holder: "ns-a/ao/ao-1", Epoch: 0}},
		{"a claim taken over", &claim.Claim{Fence: 7}, Driver{Holder: "ns-a/ao/ao-1", Epoch: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := driverOf(me, tt.cl); got != tt.want {
				t.Errorf("driverOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// callOwnerEnv is a served executor whose calls carry owner as their call
// owner, as k8senv's do on a pod's shared stream.
type callOwnerEnv struct {
	*executor.Client
	owner executor.Owner
}

func (e callOwnerEnv) ctx(ctx context.Context) context.Context {
	return executor.ContextWithCallOwner(ctx, e.owner)
}

func (e callOwnerEnv) ReadFile(ctx context.Context, p string, o tool.ReadOptions) (*tool.FileContent, error) {
	return e.Client.ReadFile(e.ctx(ctx), p, o)
}
func (e callOwnerEnv) WriteFile(ctx context.Context, p string, c []byte) error {
	return e.Client.WriteFile(e.ctx(ctx), p, c)
}
func (e callOwnerEnv) DeleteFile(ctx context.Context, p string) error {
	return e.Client.DeleteFile(e.ctx(ctx), p)
}
func (e callOwnerEnv) FileExists(ctx context.Context, p string) (bool, error) {
	return e.Client.FileExists(e.ctx(ctx), p)
}
func (e callOwnerEnv) ListDirectory(ctx context.Context, p string, depth int) ([]tool.DirEntry, error) {
	return e.Client.ListDirectory(e.ctx(ctx), p, depth)
}
func (e callOwnerEnv) ExecCommand(ctx context.Context, cmd string, o tool.ExecOptions) (*tool.ExecResult, error) {
	return e.Client.ExecCommand(e.ctx(ctx), cmd, o)
}
func (e callOwnerEnv) Grep(ctx context.Context, pattern, p string, o tool.GrepOptions) (*tool.GrepResult, error) {
	return e.Client.Grep(e.ctx(ctx), pattern, p, o)
}
func (e callOwnerEnv) Glob(ctx context.Context, pattern, p string) ([]string, error) {
	return e.Client.Glob(e.ctx(ctx), pattern, p)
}

// TestClaimMadeAnewIsTakenPastTheWorkspacesEpoch: the workspace saw an
// earlier pod of this install drive the session at epoch 5, then the
// session's claim Lease was deleted by hand; this instance makes it anew at
// epoch 0 and the workspace refuses it. Nobody else holds the claim: the
// runner stops without telling the controller to wait a claim's duration
// (the old code waited, then made the claim at 0 again, forever), and the
// next runner (the controller starts one at once) takes the claim past
// epoch 5 and the session runs its command, once. A workload that writes a
// later epoch again within a claim's duration gets the usual wait; after
// it, the floor is raised again. So does a refusal while the API server
// does not answer the claim's read.
func TestClaimMadeAnewIsTakenPastTheWorkspacesEpoch(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	api := apiClient(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "made-anew"},
		Data: map[string]string{"script.yaml": `turns:
- toolCalls:
  - name: shell
    arguments: {command: "echo ran >> runs.log"}
- text: done
`}}
	if err := api.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	dir, owners := t.TempDir(), t.TempDir()
	me := claim.Holder{Install: "ns-a/ao", Pod: "ao-1"}
	uid := types.UID("uid-made-anew")
	recordOwner := func(holder string, epoch int64) {
		t.Helper()
		c, err := servedExecutor(t, t.TempDir(), owners, executor.Owner{SessionUID: string(uid), Holder: holder, Epoch: epoch})
		if err != nil {
			t.Fatalf("record epoch %d: %v", epoch, err)
		}
		if _, err := c.FileExists(t.Context(), "."); err != nil {
			t.Fatalf("record epoch %d: %v", epoch, err)
		}
	}
	recordOwner("ns-a/ao/ao-0", 5)

	var mu sync.Mutex
	var epochs []int64
	now := time.Now()
	leases := &leaseReads{Reader: api}
	leases.down.Store(true) // until the first refusal: the API server does not answer claim reads
	r, obj := startScriptSession(t, Options{Reader: api, Journals: pub,
		Claims: &claim.Claims{Client: api, Reader: leases, Me: me},
		Now:    func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Envs: func(_ context.Context, _ *agentsv1.AgentSession, _ string, d Driver) (tool.ExecutionEnvironment, error) {
			mu.Lock()
			epochs = append(epochs, d.Epoch)
			mu.Unlock()
			c, err := servedExecutor(t, dir, owners, executor.Owner{})
			if err != nil {
				return nil, err
			}
			return callOwnerEnv{Client: c, owner: executor.Owner{SessionUID: string(uid), Holder: d.Holder, Epoch: d.Epoch}}, nil
		}}, cm.Name, uid)

	ended := func(what string) Progress {
		t.Helper()
		end := waitProgress(t, r, uid, what, func(p Progress) bool { return p.Done })
		r.Forget(uid) // what the controller does once it wrote the ended runner's status
		return end
	}
	ensure := func() {
		t.Helper()
		if err := r.Ensure(obj, "pod"); err != nil {
			t.Fatal(err)
		}
	}
	// The Lease made anew at 0 is refused while the claim cannot be read:
	// not taken for made anew, the usual wait.
	end := ended("the runner refused while the claim cannot be read ended")
	if !strings.Contains(end.Foreign, "(claim epoch 5)") {
		t.Fatalf("a refusal while the claim cannot be read ended with Foreign %q, want the wait naming epoch 5", end.Foreign)
	}
	// With the API server back, the Lease (released at 0, taken at 1) is
	// refused; no wait, the next runner takes it at 6.
	leases.down.Store(false)
	ensure()
	end = ended("the runner refused at epoch 1 ended")
	if end.Foreign != "" || end.Phase.IsFinal() {
		t.Fatalf("the refused runner ended with Foreign %q, phase %s (%s); want neither: nobody else drives the session", end.Foreign, end.Phase, end.Error)
	}
	if _, err := os.Stat(filepath.Join(dir, "runs.log")); err == nil {
		t.Fatal("the refused driver ran the command")
	}
	// A workload writes a later epoch at once: the usual wait.
	recordOwner(me.String(), 9)
	ensure()
	end = ended("the runner refused at epoch 6 ended")
	if !strings.Contains(end.Foreign, "(claim epoch 9)") {
		t.Fatalf("a second refusal within a claim's duration ended with Foreign %q, want the wait naming epoch 9", end.Foreign)
	}
	// A claim's duration later the floor is raised again, and the session runs.
	mu.Lock()
	now = now.Add(claim.DefaultDuration)
	mu.Unlock()
	ensure()
	end = ended("the runner refused at epoch 6 again ended")
	if end.Foreign != "" {
		t.Fatalf("a refusal a claim's duration later ended with Foreign %q, want none", end.Foreign)
	}
	ensure()
	end = waitProgress(t, r, uid, "the session ended", func(p Progress) bool { return p.Done })
	if end.Phase != agentsv1.PhaseSucceeded || end.Foreign != "" {
		t.Fatalf("phase %s (%s), Foreign %q; want Succeeded", end.Phase, end.Error, end.Foreign)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "runs.log")); err != nil || string(b) != "ran\n" {
		t.Errorf("runs.log = %q, %v; want the command run once", b, err)
	}
	mu.Lock()
	defer mu.Unlock()
	// Each ended runner released the claim, so the next one counts on
	// (7 is 6's release taken again); the floors lift 2 to 6 and 8 to 10.
	if want := []int64{0, 1, 6, 7, 10}; !slices.Equal(epochs, want) {
		t.Errorf("claim epochs of the runners = %v, want %v", epochs, want)
	}
	l := &coordinationv1.Lease{}
	if err := api.Get(t.Context(), client.ObjectKey{Namespace: obj.Namespace, Name: claim.Name(uid)}, l); err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(l.Spec.LeaseTransitions, 0); got != 10 {
		t.Errorf("the Lease's transitions = %d, want 10", got)
	}
}

// leaseReads is a Reader whose reads of Leases fail, as against an API
// server that does not answer, while down is set.
type leaseReads struct {
	client.Reader
	down atomic.Bool
}

func (r *leaseReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*coordinationv1.Lease); ok && r.down.Load() {
		return fmt.Errorf("get lease %s: %w", key, context.DeadlineExceeded)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}
