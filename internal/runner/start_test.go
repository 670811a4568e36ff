package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/agent-operator/agent-operator/internal/looptest"
)

// openableEnv is a local environment that can be opened ahead (like
// k8senv.Env): Open blocks until release is closed (nil: at once), counts
// its calls, and fails with err.
type openableEnv struct {
	*localenv.Env
	started chan struct{} // closed when Open is first called
	release chan struct{}
	err     error
	opens   atomic.Int32
	once    sync.Once
}

func newOpenableEnv(t *testing.T, err error) *openableEnv {
	t.Helper()
	env, lerr := localenv.New(t.TempDir())
	if lerr != nil {
		t.Fatal(lerr)
	}
	return &openableEnv{Env: env, started: make(chan struct{}), err: err}
}

func (e *openableEnv) Open(ctx context.Context) error {
	e.opens.Add(1)
	e.once.Do(func() { close(e.started) })
	if e.release != nil {
		select {
		case <-e.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return e.err
}

// TestStartStagesAndOpenAhead runs one scripted session with one tool call
// through the Runner: each start stage is reported exactly once, and the
// workspace's connection starts opening before the LLM client is built
// (once, before the first tool call).
func TestStartStagesAndOpenAhead(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	env := newOpenableEnv(t, nil)
	script := &scripted.Script{Turns: []scripted.Turn{
		{ToolCalls: []scripted.ToolCall{{Name: "shell", Arguments: []byte(`{"command": "echo hi"}`)}}},
		{Text: "done"},
	}}
	var (
		mu     sync.Mutex
		stages = map[string]int{}
	)
	r := scriptedRunner(t, pub, script, func() (tool.ExecutionEnvironment, error) { return env, nil }, func(o *Options) {
		o.Clients = func(ctx context.Context, _ ClientConfig) (loop.Client, error) {
			select {
			case <-env.started:
				return scripted.New(script, "demo"), nil
			case <-time.After(30 * time.Second):
				return nil, errors.New("the workspace's connection did not start opening before the LLM client was built")
			}
		}
		o.StartStage = func(stage string, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			stages[stage]++
		}
	})
	obj := demoSession("stages", "say hi")
	if err := r.Ensure(obj, "pod"); err != nil {
		t.Fatal(err)
	}
	end := waitProgress(t, r, obj.UID, "the session ended", func(p Progress) bool { return p.Done })
	if end.Phase != agentsv1.PhaseSucceeded || end.ToolCalls != 1 {
		t.Fatalf("phase %s (%s), %d tool calls; want Succeeded after 1", end.Phase, end.Error, end.ToolCalls)
	}
	if n := env.opens.Load(); n != 1 {
		t.Errorf("the workspace was opened %d times, want once", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, stage := range []string{StageRunnerClaim, StageBuild, StageFirstToolCall, StageRunnerToFirstTool} {
		if stages[stage] != 1 {
			t.Errorf("stage %s reported %d times, want once", stage, stages[stage])
		}
	}
	if len(stages) != 4 {
		t.Errorf("stages %v, want the four of the runner", stages)
	}
}

// TestOpeningEnv: calls wait for the early open; its error goes to the
// first call alone, unchanged, and later calls reach the environment; a
// call that gives up while the open runs returns its own context's error.
func TestOpeningEnv(t *testing.T) {
	refused := fmt.Errorf("open stream: %w", executor.ErrNotOwner)
	cases := []struct {
		name       string
		openErr    error
		hang       bool  // the open does not end while the first call waits
		wantFirst  error // nil: the first call succeeds
		wantSecond bool  // the second call succeeds
	}{
		{"open succeeds", nil, false, nil, true},
		{"open fails", ErrConfig, false, ErrConfig, true},
		{"open refused as a superseded driver", refused, false, executor.ErrNotOwner, true},
		{"caller gives up while the open runs", nil, true, context.DeadlineExceeded, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inner := newOpenableEnv(t, tc.openErr)
			release := make(chan struct{})
			inner.release = release
			env := startOpen(t.Context(), inner)
			<-inner.started
			ctx := t.Context()
			if tc.hang {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Millisecond)
				defer cancel()
			} else {
				close(release)
			}
			_, err := env.FileExists(ctx, ".")
			if !errors.Is(err, tc.wantFirst) || (tc.wantFirst == nil && err != nil) {
				t.Errorf("first call = %v, want %v", err, tc.wantFirst)
			}
			if tc.hang {
				close(release)
			}
			if _, err := env.FileExists(t.Context(), "."); (err == nil) != tc.wantSecond {
				t.Errorf("second call = %v", err)
			}
			if n := inner.opens.Load(); n != 1 {
				t.Errorf("%d opens, want 1", n)
			}
		})
	}
}

// An environment that cannot be opened ahead is used as it is.
func TestStartOpenKeepsPlainEnvironments(t *testing.T) {
	env, err := localenv.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := startOpen(t.Context(), env); got != tool.ExecutionEnvironment(env) {
		t.Errorf("startOpen wrapped a plain environment: %T", got)
	}
}

// The optional interfaces of the environment (conditional writes, web
// fetch, stdio processes) stay reachable through the opening wrapper.
func TestOpeningEnvKeepsOptionalInterfaces(t *testing.T) {
	inner := newOpenableEnv(t, nil)
	env := startOpen(t.Context(), inner)
	if _, ok := env.(tool.ConditionalWriter); !ok {
		t.Error("no tool.ConditionalWriter")
	}
	if _, ok := env.(tool.Fetcher); !ok {
		t.Error("no tool.Fetcher")
	}
	st, ok := env.(stdioStarter)
	if !ok {
		t.Fatal("no stdioStarter")
	}
	// The local environment runs stdio processes: the wrapper passes on.
	rwc, err := st.StartStdio(t.Context(), []string{"cat"}, nil, "")
	if err != nil {
		t.Fatalf("StartStdio = %v", err)
	}
	if err := rwc.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if err := tool.WriteFileIf(t.Context(), env, "new.txt", []byte("x"), ""); err != nil {
		t.Errorf("WriteFileIf = %v", err)
	}
}

// configReads closes started at the first read through it of the session's
// script ConfigMap (its metadata or the whole object).
type configReads struct {
	client.Reader
	once    sync.Once
	started chan struct{}
}

func (r *configReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.once.Do(func() { close(r.started) })
	return r.Reader.Get(ctx, key, obj, opts...)
}

// leaseGate writes a Lease only once open is closed, and fails it after
// 10 s.
type leaseGate struct {
	client.Client
	open <-chan struct{}
}

func (c *leaseGate) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*coordinationv1.Lease); ok {
		select {
		case <-c.open:
		case <-time.After(10 * time.Second):
			return errors.New("the claim was written before the client configuration was read")
		}
	}
	return c.Client.Create(ctx, obj, opts...)
}

// TestClientConfigIsReadWhileTheClaimIsTaken runs a session whose claim
// (a Lease on a real API server) can be written only once the session's
// script ConfigMap is being read: the runner reads its client
// configuration beside the claim, not after it (issue 24, a warm start's
// first API read). The session then runs as always.
func TestClientConfigIsReadWhileTheClaimIsTaken(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	api := apiClient(t)
	cm := doneScript(t, api, "ahead")
	reads := &configReads{Reader: api, started: make(chan struct{})}
	leases := &leaseGate{Client: api, open: reads.started}
	r, obj := startScriptSession(t, Options{Reader: reads, Journals: pub,
		Claims: &claim.Claims{Client: leases, Reader: api, Me: claim.Holder{Install: "ahead/agent-operator", Pod: "ahead-0"}}},
		cm.Name, "uid-ahead")
	end := waitProgress(t, r, obj.UID, "the session ended", func(p Progress) bool { return p.Done })
	if end.Phase != agentsv1.PhaseSucceeded || end.ClaimError != "" {
		t.Fatalf("phase %s (%s), claim error %q; want Succeeded", end.Phase, end.Error, end.ClaimError)
	}
}

// doneScript creates ConfigMap name in default holding a script of one
// turn that says "done".
func doneScript(t *testing.T, api client.Client, name string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Data: map[string]string{"script.yaml": "turns:\n- text: done\n"}}
	if err := api.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

// startScriptSession starts a Runner with opts (scripted clients added, and
// local workspaces unless opts has Envs) and a session of the script in
// ConfigMap cm.
func startScriptSession(t *testing.T, opts Options, cm string, uid types.UID) (*Runner, *agentsv1.AgentSession) {
	t.Helper()
	opts.Clients = func(_ context.Context, cc ClientConfig) (loop.Client, error) {
		return scripted.New(cc.Script, "demo"), nil
	}
	if opts.Envs == nil {
		opts.Envs = func(context.Context, *agentsv1.AgentSession, string, Driver) (tool.ExecutionEnvironment, error) {
			return newOpenableEnv(t, nil), nil
		}
	}
	opts.NotifyInterval, opts.Log = 10*time.Millisecond, logr.Discard()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	shutdownAtCleanup(t, r)
	obj := scriptedSession(cm, "")
	obj.UID, obj.Spec.Prompt = uid, "say done"
	if err := r.Ensure(obj, "pod"); err != nil {
		t.Fatal(err)
	}
	return r, obj
}

// TestConfigReadsAheadAreBounded: a runner reads its client configuration
// ahead only while fewer than MaxConcurrentRestores reads ahead run, so a
// burst of starts sends the API server no more reads at once than before;
// the others read in build and get the same configuration. A read ahead
// gives its slot back when it is done.
func TestConfigReadsAheadAreBounded(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	r, err := New(Options{MaxConcurrentRestores: 2, Reader: noObjects{}, Journals: pub, Log: logr.Discard(),
		Clients: func(context.Context, ClientConfig) (loop.Client, error) { return nil, errors.New("not used") },
		Envs: func(context.Context, *agentsv1.AgentSession, string, Driver) (tool.ExecutionEnvironment, error) {
			return nil, errors.New("not used")
		}})
	if err != nil {
		t.Fatal(err)
	}
	obj := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "bounded"},
		Spec: agentsv1.AgentSessionSpec{Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "demo"}}}
	r.early <- struct{}{} // two reads ahead running
	r.early <- struct{}{}
	for _, st := range []struct {
		name      string
		wantAhead bool
	}{
		{"both slots taken", false},
		{"a slot free", true},
	} {
		s := newSession(r, obj, "pod")
		t.Cleanup(s.cancel)
		s.readConfigAhead(t.Context())
		if ahead := s.config != nil; ahead != st.wantAhead {
			t.Errorf("%s: read ahead %t, want %t", st.name, ahead, st.wantAhead)
		}
		cc, err := s.clientConfig(t.Context())
		if err != nil || cc.Provider != string(agentsv1.ProviderScripted) || cc.Model != "demo" {
			t.Errorf("%s: configuration %+v, %v; want the session's", st.name, cc, err)
		}
		<-r.early // one of the running reads ends
	}
	if n := len(r.early); n != 0 {
		t.Errorf("%d slots still taken after every read ended, want 0", n)
	}
}

// commandSeenEnv is an openable local environment that opens ran at its
// first command and counts its commands.
type commandSeenEnv struct {
	*openableEnv
	ran      *looptest.Gate
	commands atomic.Int32
}

func (e *commandSeenEnv) ExecCommand(ctx context.Context, cmd string, o tool.ExecOptions) (*tool.ExecResult, error) {
	e.commands.Add(1)
	e.ran.Open()
	return e.openableEnv.ExecCommand(ctx, cmd, o)
}

// journalAfterCommand opens journals once the workspace ran a command.
type journalAfterCommand struct {
	JournalOpener
	ran *looptest.Gate
}

func (j *journalAfterCommand) OpenJournal(ctx context.Context, ref events.SessionRef, o events.JournalOptions) (*events.Journal, []loop.Event, error) {
	j.ran.Wait()
	return j.JournalOpener.OpenJournal(ctx, ref, o)
}

// TestPromptContextIsGatheredWhileTheJournalOpens: what the loop's start
// gathers from the workspace (its first command is the git snapshot) is
// taken while the runner opens the journal and builds the rest, not after
// the loop started; the session runs to its end as before.
func TestPromptContextIsGatheredWhileTheJournalOpens(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	api := apiClient(t)
	cm := doneScript(t, api, "gather-ahead")
	env := &commandSeenEnv{openableEnv: newOpenableEnv(t, nil), ran: looptest.NewGate(20 * time.Second)}
	journals := &journalAfterCommand{JournalOpener: pub, ran: env.ran}
	r, obj := startScriptSession(t, Options{Reader: api, Journals: journals,
		Envs: func(context.Context, *agentsv1.AgentSession, string, Driver) (tool.ExecutionEnvironment, error) {
			return env, nil
		}}, cm.Name, "uid-gather-ahead")
	end := waitProgress(t, r, obj.UID, "the session ended", func(p Progress) bool { return p.Done })
	if end.Phase != agentsv1.PhaseSucceeded {
		t.Fatalf("phase %s (%s); want Succeeded", end.Phase, end.Error)
	}
	if env.ran.Missed() {
		t.Error("the journal opened before the workspace ran the start's first command")
	}
}

// journalAwayAtFirst fails its first open, as a NATS that is away: the
// runner tries again after its backoff.
type journalAwayAtFirst struct {
	JournalOpener
	tried atomic.Bool
}

func (j *journalAwayAtFirst) OpenJournal(ctx context.Context, ref events.SessionRef, o events.JournalOptions) (*events.Journal, []loop.Event, error) {
	if !j.tried.Swap(true) {
		return nil, nil, errors.New("nats: no servers available for connection")
	}
	return j.JournalOpener.OpenJournal(ctx, ref, o)
}

// TestAStaleGatherIsTakenAgain: what build gathered from the workspace is
// handed to the loop only while it is fresh (gatherFresh). A journal that
// is away when the build opens it (scaled down: one failed open and the
// runner's 100 ms backoff, against a freshness of 50 ms; an hour of NATS
// outage against 5 s is the same case) makes it stale, so it is dropped and the loop's start gathers
// again: the workspace runs the git snapshot twice instead of once.
func TestAStaleGatherIsTakenAgain(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})
	api := apiClient(t)
	cm := doneScript(t, api, "gather-stale")
	for _, tc := range []struct {
		name     string
		journals JournalOpener
		fresh    time.Duration
		want     int32
	}{
		{"journal there", pub, gatherFresh, 1},
		{"journal away at first", &journalAwayAtFirst{JournalOpener: pub}, 50 * time.Millisecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(was time.Duration) { gatherFresh = was }(gatherFresh)
			gatherFresh = tc.fresh
			env := &commandSeenEnv{openableEnv: newOpenableEnv(t, nil), ran: looptest.NewGate(0)}
			r, obj := startScriptSession(t, Options{Reader: api, Journals: tc.journals,
				Envs: func(context.Context, *agentsv1.AgentSession, string, Driver) (tool.ExecutionEnvironment, error) {
					return env, nil
				}}, cm.Name, types.UID("uid-gather-"+strings.ReplaceAll(tc.name, " ", "-")))
			end := waitProgress(t, r, obj.UID, "the session ended", func(p Progress) bool { return p.Done })
			if end.Phase != agentsv1.PhaseSucceeded {
				t.Fatalf("phase %s (%s); want Succeeded", end.Phase, end.Error)
			}
			if n := env.commands.Load(); n != tc.want {
				t.Errorf("the workspace ran %d commands, want %d", n, tc.want)
			}
		})
	}
}
