package agentsession

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/runner"
)

// waitScript is one tool call that waits far longer than the session's
// deadline: no progress while it runs.
const waitScript = `turns:
  - text: "Waiting for the build."
    toolCalls:
      - name: shell
        arguments: {command: "sleep 60", timeout_ms: 120000}
  - text: "never reached"
`

// TestLimitPassingWhileWaitingIsWrittenOnTime: a session that waits (a
// tool call with no progress) while its spec.limits.deadline passes
// reaches Failed/DeadlineExceeded on time under coalesced status writes:
// the final write comes at most one status interval after the deadline,
// never held back by the deferral of progress writes. While it waits and
// nothing changes, reconciles (woken every 250ms, as by unrelated events)
// write nothing. A real runner (scripted model, local workspace, the
// suite's journal) and the reconciler run on the real clock, reconciled as
// controller-runtime would: on the runner's notifications, when a result
// asks to look again, and on the unrelated wakes.
func TestLimitPassingWhileWaitingIsWrittenOnTime(t *testing.T) {
	const deadline = 2 * time.Second
	cases := []struct {
		name     string
		interval time.Duration
	}{
		{"coalesced over 5s", 5 * time.Second},
		{"every change at once", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			s := statusWritesSession(t, ns, "wait", waitScript, "Wait for the build", "demo", agentsv1.Limits{Deadline: &metav1.Duration{Duration: deadline},
				MaxCommandTimeout: &metav1.Duration{Duration: 5 * time.Minute}})
			log := &statusWriteLog{suffix: "/agentsessions/" + s.Name + "/status"}
			cfg := rest.CopyConfig(testCfg)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log })
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
				Log: logr.Discard(),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = run.Shutdown(context.Background()) })
			rec := &Reconciler{Client: c, Scheme: scheme.Scheme, Recorder: suiteRecorder, Runner: run,
				Images: suiteImages, EventsPrefix: "agents", Class: "status-writes", StatusInterval: tc.interval,
				Now: time.Now}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)}
			reconciles := 0
			var again time.Time // when the last result asked to look again; zero: not asked
			reconcile := func() {
				t.Helper()
				res, err := rec.Reconcile(t.Context(), req)
				if err != nil {
					t.Fatalf("reconcile: %v", err)
				}
				reconciles++
				switch {
				case res.Requeue:
					again = time.Now()
				case res.RequeueAfter > 0:
					again = time.Now().Add(res.RequeueAfter)
				default:
					again = time.Time{}
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
			wake := time.NewTicker(250 * time.Millisecond)
			defer wake.Stop()
			timeout := time.After(waitFor)
			for {
				read()
				if _, live := run.Progress(got.UID); got.Status.Phase.IsFinal() && !live {
					break
				}
				var due <-chan time.Time
				if !again.IsZero() {
					due = time.After(time.Until(again))
				}
				select {
				case <-notified:
				case <-due:
				case <-wake.C:
				case <-timeout:
					t.Fatalf("session still %q after %d reconciles", got.Status.Phase, reconciles)
				}
				reconcile()
			}

			if c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionCompleted); got.Status.Phase != agentsv1.PhaseFailed ||
				c == nil || c.Reason != agentsv1.ReasonDeadlineExceeded {
				t.Fatalf("session ended %q with Completed %+v, want Failed/DeadlineExceeded", got.Status.Phase, c)
			}
			if got.Status.StartTime == nil {
				t.Fatal("no status.startTime")
			}
			writes := log.all()
			end := log.fromFinal()
			if len(end) == 0 {
				t.Fatal("no write of the final phase")
			}
			// The input started at the session's start (its USER_INPUT):
			// the deadline passed deadline later, give or take the second
			// startTime is kept to.
			passed := got.Status.StartTime.Add(deadline + time.Second)
			if late := end[0].at.Sub(passed); late > tc.interval+time.Second {
				t.Errorf("the final phase was written %s after the deadline passed, want at most the interval %s (and a second's slack)",
					late.Round(time.Millisecond), tc.interval)
			}
			// Nothing changes while the session waits: no write repeats
			// the status of the write before it.
			for i := 1; i < len(writes); i++ {
				if sameStatus(&writes[i-1].status, &writes[i].status) {
					t.Errorf("write %d wrote nothing new: %s", i, writes[i].patch)
				}
			}
			t.Logf("%d status writes over %d reconciles; the end %s after the deadline",
				len(writes), reconciles, end[0].at.Sub(got.Status.StartTime.Add(deadline)).Round(time.Millisecond))
			if reconciles < 8 {
				t.Errorf("only %d reconciles: too few to tell whether a reconcile with nothing new writes", reconciles)
			}
		})
	}
}
