package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
	"github.com/agent-operator/agent-operator/internal/llm/scripted"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/profile"
)

// The resume harness runs a scripted session whose tools have real side
// effects (shell commands appending to a file per call) against a real
// embedded NATS journal, "crashes" it at every Sync boundary, restores a new
// session from the replayed journal and lets it finish. Each tool call must
// run exactly once, or not at all with the interrupted error result (seed
// 002 FR-RES-04c), and the final journal must be gap-free.

var errCrashed = errors.New("crashed")

// crashMode says what survives a crash at a Sync boundary.
type crashMode int

const (
	// crashAfterSync: the events up to the boundary are durable; the
	// process dies before doing the next thing (e.g. running the tool).
	crashAfterSync crashMode = iota
	// crashBeforeSync: the process dies before the boundary's Sync, so
	// every event since the previous Sync is lost (e.g. a tool ran but its
	// TOOL_CALL_END never reached the journal).
	crashBeforeSync
)

func (m crashMode) String() string {
	if m == crashAfterSync {
		return "after"
	}
	return "before"
}

// crashJournal forwards to a real journal until its crashAt-th Sync, then
// drops everything, as a dead process would.
type crashJournal struct {
	inner   *events.Journal
	crashAt int // 0: never
	mode    crashMode
	cancel  context.CancelFunc

	mu      sync.Mutex
	buf     []loop.Event
	syncs   int
	crashed bool
}

func (j *crashJournal) Append(_ context.Context, ev loop.Event) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.crashed {
		return errCrashed
	}
	j.buf = append(j.buf, ev)
	return nil
}

func (j *crashJournal) Sync(ctx context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.crashed {
		return errCrashed
	}
	j.syncs++
	crash := j.syncs == j.crashAt
	if crash && j.mode == crashBeforeSync {
		return j.crashLocked()
	}
	for _, ev := range j.buf {
		if err := j.inner.Append(ctx, ev); err != nil {
			return err
		}
	}
	j.buf = nil
	if err := j.inner.Sync(ctx); err != nil {
		return err
	}
	if crash {
		return j.crashLocked()
	}
	return nil
}

func (j *crashJournal) crashLocked() error {
	j.crashed, j.buf = true, nil
	j.cancel()
	return errCrashed
}

func resumeScript() *scripted.Script {
	sh := func(id string) scripted.ToolCall {
		args, _ := json.Marshal(map[string]any{"command": "echo run >> runs/" + id + ".log && echo ran " + id})
		return scripted.ToolCall{Name: "shell", Arguments: args}
	}
	return &scripted.Script{Turns: []scripted.Turn{
		{Text: "Running a and b.", ToolCalls: []scripted.ToolCall{sh("a"), sh("b")}},
		{ToolCalls: []scripted.ToolCall{sh("c")}},
		{Text: "done"},
	}}
}

var resumeCalls = []string{"a", "b", "c"}

// newResumeSession builds a session for the workspace dir over journal j.
func newResumeSession(t *testing.T, dir string, uid string, j loop.Journal, restore []loop.Event) *loop.Session {
	t.Helper()
	env, err := localenv.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Close() })
	p := profile.Anthropic("claude-sonnet-4-5")
	cfg := loop.DefaultConfig()
	opts := []loop.Option{loop.WithJournal(j), loop.WithID(uid), loop.WithConfig(cfg)}
	if restore != nil {
		opts = append(opts, loop.WithRestore(restore))
	}
	s, err := loop.New(sequential{p}, env, scripted.New(resumeScript(), p.Model()), opts...)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range s.Events() {
		}
	}()
	return s
}

// sequential disables parallel tool calls so boundaries are deterministic.
type sequential struct{ loop.Profile }

func (p sequential) Capabilities() loop.Capabilities {
	c := p.Profile.Capabilities()
	c.ParallelToolCalls = false
	return c
}

// runOnce runs the scripted session with a crash at boundary crashAt (0:
// none), then, if it crashed, restores it from NATS and finishes it. It
// returns the number of Syncs of the first run and the final journal.
func runOnce(t *testing.T, pub *events.Publisher, ref events.SessionRef, crashAt int, mode crashMode) (int, []loop.Event, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	inner, err := pub.NewJournal(ref, 0, events.JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cj := &crashJournal{inner: inner, crashAt: crashAt, mode: mode, cancel: cancel}
	s := newResumeSession(t, dir, ref.UID, cj, nil)
	err = s.Submit(ctx, "run a, b and c")
	_ = s.Close()
	cj.mu.Lock()
	crashed, syncs := cj.crashed, cj.syncs
	cj.mu.Unlock()
	if !crashed && err != nil {
		t.Fatalf("Submit without a crash: %v", err)
	}
	if crashed {
		// A new process: replay the journal, restore, finish the input.
		j2, replayed, err := pub.OpenJournal(t.Context(), ref, events.JournalOptions{})
		if err != nil {
			t.Fatalf("OpenJournal: %v", err)
		}
		s2 := newResumeSession(t, dir, ref.UID, j2, replayed)
		switch {
		case !hasKind(replayed, loop.EventUserInput):
			err = s2.Submit(t.Context(), "run a, b and c")
		case s2.NeedsResume():
			err = s2.Resume(t.Context())
		}
		if err != nil {
			t.Fatalf("finishing the restored session: %v", err)
		}
		_ = s2.Close()
		if err := j2.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	final, err := events.Replay(t.Context(), pub.JetStream(), ref)
	if err != nil {
		t.Fatal(err)
	}
	return syncs, final, dir
}

func hasKind(evs []loop.Event, k loop.EventKind) bool {
	for _, ev := range evs {
		if ev.Kind == k {
			return true
		}
	}
	return false
}

func TestResumeAtEveryBoundary(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{})

	base := events.SessionRef{Namespace: "resume", Name: "baseline", UID: "uid-baseline"}
	boundaries, baseline, dir := runOnce(t, pub, base, 0, crashAfterSync)
	checkRun(t, baseline, dir, true)
	// Both interrupted cases must occur somewhere, or the harness proves
	// nothing about FR-RES-04c.
	var total outcome
	if boundaries < 8 {
		t.Fatalf("the baseline run had only %d Sync boundaries", boundaries)
	}

	for k := 1; k <= boundaries; k++ {
		for _, mode := range []crashMode{crashAfterSync, crashBeforeSync} {
			name := fmt.Sprintf("crash-%s-sync-%d", mode, k)
			t.Run(name, func(t *testing.T) {
				ref := events.SessionRef{Namespace: "resume", Name: name, UID: "uid-" + name}
				_, final, dir := runOnce(t, pub, ref, k, mode)
				o := checkRun(t, final, dir, false)
				total.interruptedNotRun += o.interruptedNotRun
				total.interruptedRan += o.interruptedRan
			})
		}
	}
	if total.interruptedNotRun == 0 || total.interruptedRan == 0 {
		t.Errorf("crashes covered interrupted calls not run %d times and run %d times; want both", total.interruptedNotRun, total.interruptedRan)
	}
}

// outcome counts interrupted tool calls of a run.
type outcome struct{ interruptedNotRun, interruptedRan int }

// checkRun asserts the invariants of a finished (possibly resumed) run.
func checkRun(t *testing.T, final []loop.Event, dir string, clean bool) outcome {
	t.Helper()
	var o outcome
	if err := events.CheckSequence(final); err != nil {
		t.Fatal(err)
	}
	idOf := map[string]string{} // call id -> script id
	ends := map[string][]loop.Event{}
	for _, ev := range final {
		switch ev.Kind {
		case loop.EventToolCallStart:
			for _, id := range resumeCalls {
				if strings.Contains(string(ev.Data.Arguments), "runs/"+id+".log") {
					idOf[ev.Data.CallID] = id
				}
			}
		case loop.EventToolCallEnd:
			ends[ev.Data.CallID] = append(ends[ev.Data.CallID], ev)
		}
	}
	if len(idOf) != len(resumeCalls) {
		t.Fatalf("journal has tool calls %v, want one per %v", idOf, resumeCalls)
	}
	for callID, id := range idOf {
		b, err := os.ReadFile(filepath.Join(dir, "runs", id+".log"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		runs := strings.Count(string(b), "run\n")
		if len(ends[callID]) != 1 {
			t.Errorf("call %s (%s) has %d TOOL_CALL_END events, want 1", callID, id, len(ends[callID]))
			continue
		}
		end := ends[callID][0]
		interrupted := end.Data.Error == loop.InterruptedResult
		if interrupted && runs == 0 {
			o.interruptedNotRun++
		}
		if interrupted && runs == 1 {
			o.interruptedRan++
		}
		switch {
		case runs > 1:
			t.Errorf("call %s (%s) ran %d times", callID, id, runs)
		case runs == 0 && !interrupted:
			t.Errorf("call %s (%s) never ran but its result is %q / %q", callID, id, end.Data.Output, end.Data.Error)
		case clean && (runs != 1 || interrupted):
			t.Errorf("clean run: call %s ran %d times, interrupted %v", id, runs, interrupted)
		case !interrupted && !strings.Contains(end.Data.Output, "ran "+id):
			t.Errorf("call %s (%s) result %q", callID, id, end.Data.Output)
		}
	}
	var last string
	for _, ev := range final {
		if ev.Kind == loop.EventAssistantTextEnd {
			last = ev.Data.Text
		}
	}
	if last != "done" {
		t.Errorf("the session did not finish: last assistant text %q", last)
	}
	return o
}
