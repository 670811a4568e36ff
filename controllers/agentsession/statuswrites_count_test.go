package agentsession

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// statusWriteCounter counts the PATCH and PUT requests on one session's
// status subresource that pass through it.
type statusWriteCounter struct {
	next   http.RoundTripper
	suffix string
	n      atomic.Int32
}

func (c *statusWriteCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if (req.Method == http.MethodPatch || req.Method == http.MethodPut) && strings.HasSuffix(req.URL.Path, c.suffix) {
		c.n.Add(1)
	}
	return c.next.RoundTrip(req)
}

// busyScript is a scripted session of busyTurns turns, each one tool call of
// a short command, then an answer: a runner that reports new counters many
// times while it runs.
const busyTurns = 30

func busyScript() string {
	var b strings.Builder
	b.WriteString("turns:\n")
	for range busyTurns {
		b.WriteString("  - text: \"Step.\"\n    usage: {inputTokens: 100, outputTokens: 10}\n" +
			"    toolCalls:\n      - name: shell\n        arguments: {command: \"sleep 0.05\"}\n")
	}
	b.WriteString("  - text: \"All steps done.\"\n")
	return b.String()
}

// TestBusySessionStatusWritesAreCoalesced: a running session whose real
// runner (scripted model, local workspace, the suite's journal) reports new
// counters at every step writes its status at most once per status
// interval of the reconciler's clock, on a real API server, and nothing is
// lost: the session's end is written at once with the final counters. With
// interval 0 (the old behaviour) every reported change is a write. The test
// reconciles once per runner notification and steps the reconciler's clock
// by a second each time, as if the notifications came that far apart: no
// time is measured.
func TestBusySessionStatusWritesAreCoalesced(t *testing.T) {
	const step = time.Second // of the reconciler's clock, per reconcile
	cases := []struct {
		name     string
		interval time.Duration
	}{
		{"coalesced over 5s", 5 * time.Second},
		{"every change at interval 0", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			s := statusWritesSession(t, ns, "busy", busyScript(), "Take many small steps", "demo", agentsv1.Limits{MaxTurns: 2 * busyTurns})
			counter := &statusWriteCounter{suffix: "/agentsessions/" + s.Name + "/status"}
			cfg := rest.CopyConfig(testCfg)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
			c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			notified := make(chan struct{}, 1)
			run, err := runner.New(runner.Options{
				Reader:   testClient,
				Journals: testJS,
				Clients:  runner.ProviderClients,
				Envs:     workspaces.envFactory,
				Notify: func(types.NamespacedName) {
					select {
					case notified <- struct{}{}:
					default: // one pending notification is enough: reconcile reads the latest progress
					}
				},
				NotifyInterval: time.Millisecond,
				Log:            logr.Discard(),
				Prices:         suitePrices,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = run.Shutdown(context.Background()) })
			now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
			rec := &Reconciler{Client: c, Scheme: scheme.Scheme, Recorder: suiteRecorder, Runner: run,
				Images: suiteImages, EventsPrefix: "agents", Class: "status-writes", StatusInterval: tc.interval,
				Now: func() time.Time { return now }}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)}
			reconcile := func() ctrl.Result {
				t.Helper()
				res, err := rec.Reconcile(t.Context(), req)
				if err != nil {
					t.Fatalf("reconcile: %v", err)
				}
				return res
			}
			got := &agentsv1.AgentSession{}
			phase := func() agentsv1.Phase {
				t.Helper()
				if err := testClient.Get(t.Context(), req.NamespacedName, got); err != nil {
					t.Fatal(err)
				}
				return got.Status.Phase
			}

			reconcile() // Pending
			reconcile() // finalizer and pod: Provisioning
			markPodReady(t, getPod(t, s))
			before := counter.n.Load()
			steps := 0
			timeout := time.After(waitFor)
			for !phase().IsFinal() {
				select {
				case <-notified:
				case <-time.After(time.Second): // a final write is never deferred; poll anyway
				case <-timeout:
					t.Fatalf("session still %q after %d steps", got.Status.Phase, steps)
				}
				now = now.Add(step)
				steps++
				if res := reconcile(); res.RequeueAfter > max(tc.interval, time.Second) {
					t.Errorf("step %d: requeued after %s, more than the interval %s", steps, res.RequeueAfter, tc.interval)
				}
			}
			writes := int(counter.n.Load() - before)
			t.Logf("%d status writes over %d reconciles, %s of the reconciler's clock (interval %s)",
				writes, steps, time.Duration(steps)*step, tc.interval)

			// Coalesced: one progress write per interval of the clock, plus
			// the writes that are never deferred (Running, its conditions,
			// the end).
			bound := steps*int(step/time.Second)/5 + 6
			if steps < 15 {
				t.Fatalf("only %d reconciles while the session ran: too few to tell coalesced writes from uncoalesced", steps)
			}
			switch {
			case tc.interval > 0 && writes > bound:
				t.Errorf("%d status writes over %d reconciles, want at most %d", writes, steps, bound)
			case tc.interval == 0 && writes <= bound:
				t.Errorf("%d status writes over %d reconciles at interval 0, want more than %d (every change written)", writes, steps, bound)
			}
			// The end is written at once, with the final counters.
			if got.Status.Phase != agentsv1.PhaseSucceeded || got.Status.Turns != busyTurns+1 || got.Status.ToolCalls != busyTurns {
				t.Errorf("ended session: phase %q (%q) turns %d tool calls %d, want Succeeded, %d, %d",
					got.Status.Phase, got.Status.Error, got.Status.Turns, got.Status.ToolCalls, busyTurns+1, busyTurns)
			}
			if n := rec.writes.size(); n != 0 {
				t.Errorf("%d sessions' last writes remembered after the session ended, want 0", n)
			}
		})
	}
}

// statusWritesSession creates in ns the script ConfigMap name with script and a
// session of that name replaying it on model, with prompt and limits, in
// another class than the suite's manager serves: the test's own reconciler
// drives it.
func statusWritesSession(t *testing.T, ns, name, script, prompt, model string, limits agentsv1.Limits) *agentsv1.AgentSession {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string]string{"script.yaml": script}}
	if err := testClient.Create(t.Context(), cm); err != nil {
		t.Fatalf("create script: %v", err)
	}
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName(name), Namespace: ns,
			Labels: map[string]string{agentsv1.LabelClass: "status-writes"}},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: prompt,
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: model,
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: name}},
			Limits: limits,
		},
	}
	if err := testClient.Create(t.Context(), s); err != nil {
		t.Fatalf("create session: %v", err)
	}
	return s
}
