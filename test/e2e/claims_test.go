//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
)

// claimSteps is how many shell steps the overlapping-installs session runs.
const claimSteps = 10

// Two installs of the chart with the same scope (both handle the suite's sessions): each
// session is driven by exactly one of them, the one holding its claim, and the other says so.
var _ = Describe("two installs with overlapping scope", Ordered, ContinueOnFailure, Label("claims"), func() {
	a := withOperator("ao-claims-a", "ao-claims-a")
	b := withOperator("ao-claims-b", "ao-claims-b")

	It("runs every step of a session exactly once, driven by one install, the other reporting it as owner", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-claims")
		s := scriptedSession(ctx, ns, "claimed", stepsScript(claimSteps, 1), func(s *agentsv1.AgentSession) {
			s.Spec.Limits.MaxTurns = 2 * claimSteps
		})
		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Owner).NotTo(BeEmpty(), "status.owner")
		owner, other := a, b
		if strings.HasPrefix(final.Status.Owner, b.ns+"/") {
			owner, other = b, a
		}
		Expect(final.Status.Owner).To(HavePrefix(owner.ns+"/"), "the owner is one of the two installs")
		GinkgoWriter.Printf("driven by %s; the other install is in %s\n", final.Status.Owner, other.ns)

		ran := stepsRun(ctx, ns, final.Status.PodName)
		for i := 1; i <= claimSteps; i++ {
			Expect(ran[fmt.Sprintf("step%d", i)]).To(Equal(1), "step%d ran %d times (all: %v)", i, ran[fmt.Sprintf("step%d", i)], ran)
		}
		evs := completeJournal(ctx, owner.plugin, final, "--operator-namespace", owner.ns)
		starts := map[string]int{}
		for _, ev := range evs {
			if ev.Kind == loop.EventToolCallStart {
				starts[ev.Data.CallID]++
			}
		}
		Expect(starts).To(HaveLen(claimSteps))
		for id, n := range starts {
			Expect(n).To(Equal(1), "TOOL_CALL_START of %s", id)
		}
		// The other install left it alone and said who drives it (an Event from its manager).
		Eventually(func(g Gomega, ctx context.Context) {
			var list corev1.EventList
			g.Expect(f.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.InvolvedObject.Name == s.Name && e.Reason == "OwnedElsewhere" {
					notes = append(notes, e.Message)
				}
			}
			g.Expect(notes).To(ContainElement(ContainSubstring("Driven by operator instance " + final.Status.Owner)))
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
	}, SpecTimeout(6*time.Minute))
})
