package agentsession

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// statusWriteLog keeps, for each PATCH or PUT of one session's status
// subresource that passes through it, the patch sent and the session the
// API server answered with.
type statusWriteLog struct {
	next   http.RoundTripper
	suffix string

	mu     sync.Mutex
	writes []statusWrite
}

type statusWrite struct {
	at     time.Time // when the API server answered
	patch  string
	status agentsv1.AgentSessionStatus
}

func (l *statusWriteLog) RoundTrip(req *http.Request) (*http.Response, error) {
	if (req.Method != http.MethodPatch && req.Method != http.MethodPut) || !strings.HasSuffix(req.URL.Path, l.suffix) {
		return l.next.RoundTrip(req)
	}
	var patch []byte
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			patch, _ = io.ReadAll(b)
			_ = b.Close()
		}
	}
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read status write response: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var s agentsv1.AgentSession
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("decode status write response: %w", err)
	}
	l.mu.Lock()
	l.writes = append(l.writes, statusWrite{at: time.Now(), patch: string(patch), status: s.Status})
	l.mu.Unlock()
	return resp, nil
}

// all returns the writes so far.
func (l *statusWriteLog) all() []statusWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]statusWrite(nil), l.writes...)
}

// fromFinal returns the writes from the first one that made the phase final.
func (l *statusWriteLog) fromFinal() []statusWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range l.writes {
		if w.status.Phase.IsFinal() {
			return append([]statusWrite(nil), l.writes[i:]...)
		}
	}
	return nil
}

// afterGate records a session's change with the real recorder it wraps,
// once gate is closed.
type afterGate struct {
	runner.ChangesRecorder
	gate <-chan struct{}
}

func (a *afterGate) Record(ctx context.Context, env tool.ExecutionEnvironment, s *agentsv1.AgentSession, input string) *changes.Result {
	select {
	case <-a.gate:
	case <-ctx.Done():
	}
	return a.ChangesRecorder.Record(ctx, env, s, input)
}

// endScript is a priced session of one tool call and an answer.
const endScript = `turns:
  - text: "Writing it."
    usage: {inputTokens: 100, outputTokens: 10}
    toolCalls:
      - name: write_file
        arguments: {file_path: end.txt, content: "the end\n"}
  - text: "All done."
    usage: {inputTokens: 120, outputTokens: 5}
`

// TestSessionEndIsOneStatusWrite: a session that a real runner (scripted
// model, local workspace, the suite's journal, a claim Lease on the real
// API server, a real changes recorder) runs to Succeeded has its end
// written in one status write: the final phase together with its final
// figures (turns, tool calls, tokens, cost, working time, result), its
// completion time, the claim's owner, the change recorded and the
// conditions. Nothing is written after it while nothing
// changes (the pod is kept: retainAfterSuccess has not passed). Driven one
// reconcile per runner notification, whatever the status interval.
func TestSessionEndIsOneStatusWrite(t *testing.T) {
	cases := []struct {
		name     string
		interval time.Duration
		step     time.Duration // of the reconciler's clock, per reconcile
	}{
		{"every change at once", 0, time.Second},
		{"coalesced over 5s", 5 * time.Second, time.Second},
		// No progress write falls due: every write is a phase of its own.
		{"coalesced, the clock standing still", 5 * time.Second, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			s := statusWritesSession(t, ns, "end", endScript, "Write end.txt", "priced", agentsv1.Limits{})
			log := &statusWriteLog{suffix: "/agentsessions/" + s.Name + "/status"}
			cfg := rest.CopyConfig(testCfg)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log })
			c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			me := claim.Holder{Install: "status-writes/agent-operator", Pod: "end-0"}
			// The runner's notifications are taken in lockstep: a
			// notification waits until the reconcile it causes is done, so
			// every state the runner notifies about is reconciled (the
			// runner's end as a whole too, not only its last state).
			notes := make(chan chan struct{})
			// ended is closed once a reconcile saw the runner's final phase:
			// the change is recorded after that, as when a reconcile comes
			// between the input's end and the recording.
			ended := make(chan struct{})
			var endSeen sync.Once
			stopNotes := make(chan struct{})
			run, err := runner.New(runner.Options{
				Claims:   &claim.Claims{Client: testClient, Reader: testClient, Me: me},
				Reader:   testClient,
				Journals: testJS,
				Clients:  runner.ProviderClients,
				Envs:     workspaces.envFactory,
				Notify: func(types.NamespacedName) {
					done := make(chan struct{})
					select {
					case notes <- done:
					case <-stopNotes:
						return
					}
					select {
					case <-done:
					case <-stopNotes:
					}
				},
				NotifyInterval: time.Millisecond,
				Log:            logr.Discard(),
				Prices:         suitePrices,
				Changes: &afterGate{gate: ended, ChangesRecorder: &changes.Recorder{Store: testJS.ChangesStore(),
					Secrets: changes.SecretsFrom(testClient), Log: logr.Discard()}},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = run.Shutdown(context.Background()) })
			t.Cleanup(func() { close(stopNotes) }) // first: Shutdown's notifications go nowhere
			// The reconciler's clock runs a minute ahead of the runner's (and
			// well within the pod's retention after success, 10 minutes): a
			// time of the session's life taken from the reconcile that saw
			// it, instead of from the journal, shows in the end's write.
			now := time.Now().Add(time.Minute)
			rec := &Reconciler{Client: c, Scheme: scheme.Scheme, Recorder: suiteRecorder, Runner: run,
				Images: suiteImages, EventsPrefix: "agents", Class: "status-writes", StatusInterval: tc.interval,
				Claims: &claim.Claims{Client: testClient, Reader: testClient, Me: me},
				Now:    func() time.Time { return now }}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)}
			reconcile := func() {
				t.Helper()
				if _, err := rec.Reconcile(t.Context(), req); err != nil {
					t.Fatalf("reconcile: %v", err)
				}
			}
			got := &agentsv1.AgentSession{}
			read := func() {
				t.Helper()
				if err := testClient.Get(t.Context(), req.NamespacedName, got); err != nil {
					t.Fatal(err)
				}
			}

			reconcile() // Pending
			reconcile() // finalizer and pod: Provisioning
			markPodReady(t, getPod(t, s))
			// Reconcile on every notification (and every 100ms besides)
			// until the session is final and its runner forgotten: the
			// runner's whole end has been seen.
			timeout := time.After(waitFor)
			for {
				read()
				_, live := run.Progress(got.UID)
				if got.Status.Phase.IsFinal() && !live {
					break
				}
				var done chan struct{}
				select {
				case done = <-notes:
				case <-time.After(100 * time.Millisecond):
				case <-timeout:
					t.Fatalf("session still %q (runner live: %t)", got.Status.Phase, live)
				}
				now = now.Add(tc.step)
				reconcile()
				if p, ok := run.Progress(got.UID); ok && p.Phase.IsFinal() {
					endSeen.Do(func() { close(ended) })
				}
				if done != nil {
					close(done)
				}
			}
			// Later reconciles with nothing new write nothing.
			for range 3 {
				now = now.Add(tc.step)
				reconcile()
			}
			if tc.step == 0 {
				// A session that ends within one interval writes each phase once:
				// the runner's start (its claim's owner, the message that the
				// agent is starting cleared) waits for the next write.
				var phases []agentsv1.Phase
				for _, w := range log.all() {
					phases = append(phases, w.status.Phase)
				}
				want := []agentsv1.Phase{agentsv1.PhasePending, agentsv1.PhaseProvisioning, agentsv1.PhaseRunning, agentsv1.PhaseSucceeded}
				if !slices.Equal(phases, want) {
					for i, w := range log.all() {
						t.Logf("write %d: %s", i, w.patch)
					}
					t.Errorf("status writes of a session that ended within one interval: phases %v, want %v", phases, want)
				}
			}

			end := log.fromFinal()
			for i, w := range end {
				t.Logf("write %d from the final phase on: %s", i, w.patch)
			}
			if len(end) != 1 {
				t.Fatalf("%d status writes from the final phase on, want 1", len(end))
			}
			st := end[0].status
			if st.Phase != agentsv1.PhaseSucceeded {
				t.Errorf("the end wrote phase %q (%q), want Succeeded", st.Phase, st.Error)
			}
			wantFigures := []struct {
				what string
				ok   bool
			}{
				{"turns 2", st.Turns == 2},
				{"tool calls 1", st.ToolCalls == 1},
				{"total tokens 235", st.Usage.Total == 235},
				{"a cost", st.Cost != "" && st.Cost != "0" && st.Currency != ""},
				{"the tree cost", st.TreeCost == st.Cost},
				{"working time", st.WorkingTime != nil},
				{"the result", st.Result == "All done."},
				{"the owner", st.Owner == me.String()},
				{"start and completion time", st.StartTime != nil && st.CompletionTime != nil},
				{"idle since", st.IdleSince != nil},
				{"the last event sequence", st.LastEventSequence > 0},
				{"the journal's condition", meta.IsStatusConditionTrue(st.Conditions, agentsv1.ConditionJournalAvailable)},
				{"Completed=True", meta.IsStatusConditionTrue(st.Conditions, agentsv1.ConditionCompleted)},
				{"Ready=True", meta.IsStatusConditionTrue(st.Conditions, agentsv1.ConditionReady)},
				{"WorkspaceReady=True", meta.IsStatusConditionTrue(st.Conditions, agentsv1.ConditionWorkspaceReady)},
				{"the change recorded", st.Changes != nil && st.Changes.FilesChanged == 1 &&
					meta.IsStatusConditionTrue(st.Conditions, agentsv1.ConditionChangesRecorded)},
				// The change is recorded after the input ended, so never
				// dated before the session went idle (the e2e spec of
				// changes waits for exactly that, and once waited forever
				// when the end's one write dated idleSince by the reconcile).
				{"the change recorded no earlier than idle since", st.Changes != nil && st.Changes.RecordedTime != nil &&
					st.IdleSince != nil && !st.Changes.RecordedTime.Before(st.IdleSince)},
			}
			for _, f := range wantFigures {
				if !f.ok {
					t.Errorf("the end's write lacks %s: %+v", f.what, st)
				}
			}
			// What the end wrote is what status says now.
			read()
			if !equalStatus(got.Status, st) {
				t.Errorf("status after the end differs from the end's write:\n%+v\nwant\n%+v", got.Status, st)
			}
		})
	}
}

// equalStatus compares two statuses as JSON (what the API server keeps).
func equalStatus(a, b agentsv1.AgentSessionStatus) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}
