//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// Two installs with disjoint watchNamespaces (issue 15): each runs only the sessions of its own
// namespace, and each one's admission policy covers only the sessions it serves, so neither
// refuses the children the other's manager spawns (before, every install's policy applied to
// every AgentSession in the cluster and named only its own manager: `make demo`'s install made
// the suite's fan-out fail). A session of a class no install serves stays Pending and says why.
var _ = Describe("installs with disjoint watchNamespaces", Ordered, ContinueOnFailure, Label("claims", "scoping"), func() {
	var nsA, nsB, opA, opB string

	BeforeAll(func(ctx SpecContext) {
		for _, p := range []*string{&nsA, &nsB} {
			ns, err := f.CreateNamespace(ctx, "ao-scope")
			Expect(err).NotTo(HaveOccurred())
			*p = ns.Name
			DeferCleanup(func(ctx context.Context) { Expect(f.DeleteNamespace(ctx, ns.Name)).To(Succeed()) }, NodeTimeout(3*time.Minute))
		}
		opA = installOperator(ctx, "ao-scope-a", "ao-scope-a", "watchNamespaces={"+nsA+"}", "reportUnservedAfter=5s")
		opB = installOperator(ctx, "ao-scope-b", "ao-scope-b", "watchNamespaces={"+nsB+"}", "reportUnservedAfter=5s")
	}, NodeTimeout(8*time.Minute))

	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() {
			for _, ns := range []string{opA, opB, nsA, nsB} {
				if ns != "" {
					f.DumpNamespace(ctx, ns, GinkgoWriter)
				}
			}
		}
	})

	It("runs each namespace's session, children included, by its own install only", func(ctx SpecContext) {
		for _, tc := range []struct{ ns, op string }{{nsA, opA}, {nsB, opB}} {
			run := runFanOut(ctx, tc.ns, 2, 1, 4*time.Minute)
			Expect(run.final.Status.Owner).To(HavePrefix(tc.op+"/"), "the session in %s is driven by the install watching it", tc.ns)
			for _, c := range run.children {
				Expect(c.Status.Owner).To(HavePrefix(tc.op+"/"), "child %s is driven by the install watching %s", c.Name, tc.ns)
			}
		}
	}, SpecTimeout(10*time.Minute))

	It("leaves a session of a class no install serves Pending, with a condition that says why", func(ctx SpecContext) {
		s := scriptedSession(ctx, nsA, "unserved", helloScript, func(s *agentsv1.AgentSession) {
			s.Labels = map[string]string{agentsv1.LabelClass: "ao-nobody"}
		})
		Eventually(func(g Gomega, ctx context.Context) {
			got := &agentsv1.AgentSession{}
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(agentsv1.PhasePending))
			c := meta.FindStatusCondition(got.Status.Conditions, "Accepted")
			g.Expect(c).NotTo(BeNil(), "condition Accepted")
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal("ClassNotServed"))
			g.Expect(c.Message).To(ContainSubstring(`"ao-nobody"`))
			g.Expect(got.Status.PodName).To(BeEmpty(), "no install made a workspace for it")
			g.Expect(got.Status.Owner).To(BeEmpty(), "no install claimed it")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	}, SpecTimeout(3*time.Minute))
})
