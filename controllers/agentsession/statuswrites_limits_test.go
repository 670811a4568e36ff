package agentsession

import (
	"context"
	"net/http"
	"strings"
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

// TestLimitPassingWhileWaitingIsWrittenOnTime: a session whose
// spec.limits.deadline passes while its runner waits in a long tool call
// (no progress: `sleep 60`) reaches Failed/DeadlineExceeded, and the
// reconciles that follow the runner's end write it at once, under
// coalesced status writes as without: the end is not held back by the
// deferral of progress writes. The end is one write, made once the runner
// ended, and the session ends once (its runner is forgotten, none starts
// again). While it waits and nothing changes, reconciles write nothing:
// no write repeats the status of the write before it.
//
// A real runner (scripted model, local workspace, the suite's journal) and
// the reconciler, driven deterministically: the runner's notifications in
// lockstep with the reconciles they cause (as in
// TestSessionEndIsOneStatusWrite), unrelated wakes besides (every 100ms),
// and the reconciler's clock moved by the test only: while the session
// runs, a reconcile after a result that asked to look again (RequeueAfter)
// comes that much later on it, so a deferred progress write is due then;
// the reconciles after the runner's end come at the instant of the last
// write and the clock stands still between them. The runner's deadline is
// its own, on the real clock: the test waits for it by the runner's
// notifications and progress, and asserts reconciles and writes, not
// durations.
func TestLimitPassingWhileWaitingIsWrittenOnTime(t *testing.T) {
	const deadline = 2 * time.Second
	// endReconciles bounds the reconciles, on a clock that does not move,
	// after the runner ended, in which the end must be written. Once the
	// runner's progress says Done, endHeld no longer holds the final phase
	// and the status interval is not consulted (an ended runner's last word
	// is written before it is forgotten; a final phase is never deferred),
	// so the first reconcile writes it. The second is for a conflict: a
	// reconcile whose write is refused asks to read again (Requeue); none is
	// expected, this test being the session's one writer.
	const endReconciles = 2
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
			// The runner's notifications are taken in lockstep: a
			// notification waits until the reconcile it causes is done (or,
			// once the runner decided the end, until the test took it).
			notes := make(chan chan struct{})
			stopNotes := make(chan struct{})
			run, err := runner.New(runner.Options{
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
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = run.Shutdown(context.Background()) })
			t.Cleanup(func() { close(stopNotes) }) // first: Shutdown's notifications go nowhere
			now := time.Now()                      // the reconciler's clock
			rec := &Reconciler{Client: c, Scheme: scheme.Scheme, Recorder: suiteRecorder, Runner: run,
				Images: suiteImages, EventsPrefix: "agents", Class: "status-writes", StatusInterval: tc.interval,
				Now: func() time.Time { return now }}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)}
			reconciles := 0
			var (
				asked       time.Duration // how much later the last result asked to look again
				lastWriteAt time.Time     // the reconciler's clock at the last status write
			)
			// reconcile is a reconcile at the instant the last result asked
			// for (or now, when it asked for none).
			reconcile := func() {
				t.Helper()
				now = now.Add(asked)
				before := len(log.all())
				res, err := rec.Reconcile(t.Context(), req)
				if err != nil {
					t.Fatalf("reconcile: %v", err)
				}
				reconciles++
				if len(log.all()) > before {
					lastWriteAt = now
				}
				asked = res.RequeueAfter
			}
			got := &agentsv1.AgentSession{}
			read := func() {
				t.Helper()
				if err := testClient.Get(t.Context(), req.NamespacedName, got); err != nil {
					t.Fatal(err)
				}
			}
			timeout := time.After(waitFor)

			reconcile() // Pending
			reconcile() // finalizer and pod: Provisioning
			markPodReady(t, getPod(t, s))
			// Until the runner decided the end (its progress says a final
			// phase): a reconcile on each of its notifications and on
			// unrelated wakes (every 100ms). The runner cannot end
			// meanwhile: it says it decided in a notification, and ends
			// only after that notification was taken, which is after the
			// reconcile that saw the decision, the last of this loop. So
			// no reconcile here sees the runner's end.
			wake := time.NewTicker(100 * time.Millisecond)
			defer wake.Stop()
			for decided := false; !decided; {
				var done chan struct{}
				select {
				case done = <-notes:
				case <-wake.C:
				case <-timeout:
					read()
					t.Fatalf("session still %q after %d reconciles: the deadline was not enforced", got.Status.Phase, reconciles)
				}
				reconcile()
				p, _ := run.Progress(s.UID)
				decided = p.Phase.IsFinal()
				if done != nil {
					close(done)
				}
			}
			if end := log.fromFinal(); len(end) != 0 {
				t.Fatalf("the final phase was written before the runner ended: %s", end[0].patch)
			}
			// The runner ends (its tool call killed, its last events
			// drained): its notifications are taken without a reconcile
			// from here on, and its progress is polled until it says Done.
			go func() {
				for {
					select {
					case done := <-notes:
						close(done)
					case <-stopNotes:
						return
					}
				}
			}()
			for {
				p, ok := run.Progress(s.UID)
				if !ok {
					t.Fatal("the runner was forgotten before a reconcile saw its end")
				}
				if p.Done {
					break
				}
				select {
				case <-wake.C:
				case <-timeout:
					t.Fatalf("the runner did not end after deciding %s/%s", p.Phase, p.Reason)
				}
			}
			// The runner has ended and no reconcile has seen it. The
			// reconciles that follow are put at the instant of the last
			// write, and the reconciler's clock does not move between them
			// (a result asking to look again is looked at again at once):
			// a final phase deferred like progress would wait a whole
			// interval, and would not be written by them.
			now, asked = lastWriteAt, 0
			if n := len(log.fromFinal()); n != 0 {
				t.Fatalf("%d writes of the final phase before the runner's end was reconciled, want 0", n)
			}
			wroteIn := 0 // the reconcile after the runner's end that wrote the final phase
			for i := 1; i <= endReconciles && wroteIn == 0; i++ {
				reconcile()
				asked = 0 // looked at again at once, not later
				if len(log.fromFinal()) > 0 {
					wroteIn = i
				}
			}
			if wroteIn == 0 {
				read()
				t.Fatalf("%d reconciles after the runner ended wrote no final phase (status: %q)", endReconciles, got.Status.Phase)
			}
			// Later reconciles, however late, write nothing more, and no
			// runner starts again: the session ended once.
			for range 3 {
				now = now.Add(tc.interval + time.Second)
				reconcile()
			}
			if _, ok := run.Progress(s.UID); ok {
				t.Error("a runner is still remembered after the session's end was written")
			}

			writes := log.all()
			end := log.fromFinal()
			for i, w := range end {
				t.Logf("write %d from the final phase on: %s", i, w.patch)
			}
			if len(end) == 0 {
				t.Fatal("no write of the final phase")
			}
			// The session ends once: one write makes the phase final, and
			// the writes after it (the failed session's pod released) change
			// nothing but the workspace's condition.
			st := end[0].status
			for i, w := range end[1:] {
				if !sameStatus(withoutWorkspace(&st), withoutWorkspace(&w.status)) {
					t.Errorf("write %d after the end changed more than the workspace's condition: %s", i+1, w.patch)
				}
			}
			completed := meta.FindStatusCondition(st.Conditions, agentsv1.ConditionCompleted)
			ready := meta.FindStatusCondition(st.Conditions, agentsv1.ConditionReady)
			wantEnd := []struct {
				what string
				ok   bool
			}{
				{"phase Failed", st.Phase == agentsv1.PhaseFailed},
				{"Completed=True/DeadlineExceeded", completed != nil && completed.Status == metav1.ConditionTrue &&
					completed.Reason == agentsv1.ReasonDeadlineExceeded},
				{"Ready=False/DeadlineExceeded", ready != nil && ready.Status == metav1.ConditionFalse &&
					ready.Reason == agentsv1.ReasonDeadlineExceeded},
				{"the error naming spec.limits.deadline", strings.Contains(st.Error, "spec.limits.deadline")},
				{"start and completion time", st.StartTime != nil && st.CompletionTime != nil},
				{"one turn (the second never reached)", st.Turns == 1},
				{"the one tool call, ended by the deadline", st.ToolCalls == 1},
				{"the result", st.Result == "Waiting for the build."},
				{"working time", st.WorkingTime != nil},
				{"the last event sequence", st.LastEventSequence > 0},
			}
			for _, f := range wantEnd {
				if !f.ok {
					t.Errorf("the end's write lacks %s: %+v", f.what, st)
				}
			}
			// What the end wrote is what status says now (but for the
			// workspace's condition).
			read()
			if !sameStatus(withoutWorkspace(&got.Status), withoutWorkspace(&st)) {
				t.Errorf("status after the end differs from the end's write:\n%+v\nwant\n%+v", got.Status, st)
			}
			// Nothing changes while the session waits: no write repeats
			// the status of the write before it.
			for i := 1; i < len(writes); i++ {
				if sameStatus(&writes[i-1].status, &writes[i].status) {
					t.Errorf("write %d wrote nothing new: %s", i, writes[i].patch)
				}
			}
			t.Logf("%d status writes over %d reconciles; the end written by reconcile %d after the runner ended",
				len(writes), reconciles, wroteIn)
			if reconciles < 8 {
				t.Errorf("only %d reconciles: too few to tell whether a reconcile with nothing new writes", reconciles)
			}
		})
	}
}

// withoutWorkspace returns a copy of st without its WorkspaceReady condition.
func withoutWorkspace(st *agentsv1.AgentSessionStatus) *agentsv1.AgentSessionStatus {
	c := st.DeepCopy()
	meta.RemoveStatusCondition(&c.Conditions, agentsv1.ConditionWorkspaceReady)
	return c
}
