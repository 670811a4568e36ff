//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// writesCalls is how many tool calls each session of the write-count benchmark makes; each
// runs `sleep 2`, so a session calls a tool about every 2 s for about a minute.
const writesCalls = 30

// writesResult is the final answer of writesScript.
const writesResult = "Slept through every call."

// benchWriteSessions is how many sessions the write-count benchmark runs at once
// (BENCH_WRITE_SESSIONS overrides 10).
func benchWriteSessions() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_WRITE_SESSIONS")); err == nil && n > 0 {
		return n
	}
	return 10
}

// writesScript makes calls identical tool calls (one YAML anchor and its aliases), each a
// 2 s command, then answers writesResult.
func writesScript(calls int) string {
	var b strings.Builder
	b.WriteString("turns:\n  - &call {toolCalls: [{name: shell, arguments: {command: \"sleep 2\"}}]}\n")
	for range calls - 1 {
		b.WriteString("  - *call\n")
	}
	fmt.Fprintf(&b, "  - text: %q\n", writesResult)
	return b.String()
}

// writesPerSessionMinute runs benchWriteSessions sessions of writesScript at once in ns, each
// in its own pod, reads the API server's request counters before the first create and after
// the last Succeeded, and reports the writes per session-minute: on agentsessions (status
// included; the spec's own creates are not counted), on agentsessions/status alone, and on
// the whole cluster. A session-minute is a minute of one session's life from its create to
// Succeeded (polled every 500 ms). The spec asserts only that every session succeeds.
func writesPerSessionMinute(ctx context.Context, ns string) {
	GinkgoHelper()
	n := benchWriteSessions()
	// Delete every session while the operator still runs: their finalizers would otherwise
	// keep the namespace Terminating once the operator is uninstalled.
	DeferCleanup(func(ctx context.Context) {
		Expect(deleteAllSessions(ctx, ns)).To(Succeed())
	}, NodeTimeout(5*time.Minute))
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writes-script"},
		Data:       map[string]string{"script.yaml": writesScript(writesCalls)},
	}
	Expect(f.Client.Create(ctx, cm)).To(Succeed())

	before, err := apiRequests(ctx)
	Expect(err).NotTo(HaveOccurred())
	names := make([]string, n)
	created := make([]time.Time, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			names[i] = fmt.Sprintf("writes-%02d", i)
			s := loadSession(ns, names[i], cm.Name)
			s.Spec.Prompt = "Sleep two seconds at a time."
			s.Spec.Limits.MaxTurns = writesCalls + 5
			created[i] = time.Now()
			errs[i] = f.Client.Create(ctx, s)
		})
	}
	wg.Wait()
	for i, err := range errs {
		Expect(err).NotTo(HaveOccurred(), "create session %s", names[i])
	}

	// Wait for every session to succeed, noting when each was first seen Succeeded.
	index := make(map[string]int, n)
	for i, name := range names {
		index[name] = i
	}
	lived := make([]time.Duration, n)
	finished := 0
	Eventually(func(g Gomega, ctx context.Context) {
		var list agentsv1.AgentSessionList
		g.Expect(f.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		now := time.Now()
		for _, s := range list.Items {
			i, ok := index[s.Name]
			if !ok || lived[i] != 0 || !s.Status.Phase.IsFinal() {
				continue
			}
			if s.Status.Phase != agentsv1.PhaseSucceeded {
				StopTrying(fmt.Sprintf("session %s ended %s: %s", s.Name, s.Status.Phase, s.Status.Error)).Now()
			}
			lived[i] = now.Sub(created[i])
			finished++
		}
		g.Expect(finished).To(Equal(n), "sessions Succeeded")
	}).WithContext(ctx).WithTimeout(10 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	after, err := apiRequests(ctx)
	Expect(err).NotTo(HaveOccurred())

	var list agentsv1.AgentSessionList
	Expect(f.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	for _, s := range list.Items {
		Expect(s.Status.Result).To(Equal(writesResult), "session %s ran its script to the end", s.Name)
		Expect(s.Status.ToolCalls).To(BeNumerically("==", writesCalls), "session %s tool calls", s.Name)
	}

	var minutes float64
	for _, d := range lived {
		minutes += d.Minutes()
	}
	d := after.sub(before)
	status := d.writes("agentsessions/status")
	sessions := d.writes("agentsessions") - float64(n) + status // less the spec's own creates
	per := func(v float64) string { return fmt.Sprintf("%.1f", v/minutes) }
	what := fmt.Sprintf("writes: %d sessions, a tool call every 2 s for about a minute", n)
	benchRow(what+", session-minutes (create -> Succeeded)", fmt.Sprintf("%.1f", minutes), "")
	benchRow(what+", API writes per session-minute (agentsessions, status included)", per(sessions), "")
	benchRow(what+", status writes per session-minute (agentsessions/status)", per(status), "")
	benchRow(what+", API writes per session-minute (whole cluster)", per(d.writes("")), "")
	benchRow(what+", largest write counts (whole cluster)", d.topWrites(8), "")
}
