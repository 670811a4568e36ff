//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// helmRelease is the release name of the operator these specs install. It differs from the
// demo's ("agent-operator") so the cluster-scoped RBAC objects of both never collide.
const helmRelease = "ao-e2e"

// helloScript writes hello.py, edits it, runs it and checks that the run printed the edit.
const helloScript = `turns:
  - text: "Creating the file."
    toolCalls:
      - name: write_file
        arguments: {file_path: hello.py, content: "print('Hello World')\n"}
  - text: "Editing it."
    toolCalls:
      - name: edit_file
        arguments: {file_path: hello.py, old_string: "Hello World", new_string: "Hello from e2e"}
  - text: "Running it."
    toolCalls:
      - name: shell
        arguments: {command: "python3 hello.py"}
  - expect: {lastToolResultContains: "Hello from e2e"}
    text: "Done: hello.py prints Hello from e2e."
`

// failingScript fails its first turn with an authentication error, which is never retried.
const failingScript = `turns:
  - error: {kind: authentication, statusCode: 401, message: "invalid x-api-key"}
`

// These specs install the operator with its Helm chart and run scripted sessions end to end:
// workspace pod, tools over the exec stream, status, conditions and cleanup.
var _ = Describe("operator installed with Helm", Ordered, ContinueOnFailure, func() {
	var operatorNS string

	BeforeAll(func(ctx SpecContext) {
		operatorNS = installOperator(ctx, helmRelease, "ao-operator")
	}, NodeTimeout(5*time.Minute))

	// The operator's logs and events explain most failures.
	AfterEach(func(ctx SpecContext) {
		if CurrentSpecReport().Failed() && operatorNS != "" {
			f.DumpNamespace(ctx, operatorNS, GinkgoWriter)
		}
	})

	It("runs a scripted session to Succeeded in a locked-down workspace pod and cleans up", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-session")
		s := scriptedSession(ctx, ns, "hello", helloScript)

		final := waitForFinalPhase(ctx, s)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		completed := meta.FindStatusCondition(final.Status.Conditions, agentsv1.ConditionCompleted)
		Expect(completed).NotTo(BeNil(), "condition %s", agentsv1.ConditionCompleted)
		Expect(completed.Status).To(Equal(metav1.ConditionTrue), "condition %s: %s %s", completed.Type, completed.Reason, completed.Message)
		Expect(completed.Reason).To(Equal(agentsv1.ReasonSucceeded))
		Expect(final.Status.Turns).To(BeNumerically(">", 0))
		Expect(final.Status.ToolCalls).To(BeNumerically(">=", 3))
		Expect(final.Status.Result).To(ContainSubstring("Hello from e2e"))
		Expect(final.Status.PodName).NotTo(BeEmpty())

		pod := &corev1.Pod{}
		Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: final.Status.PodName}, pod)).To(Succeed())
		Expect(pod.Spec.AutomountServiceAccountToken).To(HaveValue(BeFalse()), "automountServiceAccountToken")
		Expect(pod.Spec.SecurityContext).NotTo(BeNil())
		Expect(pod.Spec.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()), "pod runAsNonRoot")
		Expect(pod.Spec.SecurityContext.SeccompProfile).NotTo(BeNil())
		Expect(pod.Spec.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			sc := c.SecurityContext
			Expect(sc).NotTo(BeNil(), "container %s securityContext", c.Name)
			Expect(sc.AllowPrivilegeEscalation).To(HaveValue(BeFalse()), "container %s allowPrivilegeEscalation", c.Name)
			Expect(sc.Privileged).To(Or(BeNil(), HaveValue(BeFalse())), "container %s privileged", c.Name)
			Expect(sc.Capabilities).NotTo(BeNil(), "container %s capabilities", c.Name)
			Expect(sc.Capabilities.Drop).To(ContainElement(corev1.Capability("ALL")), "container %s drops all capabilities", c.Name)
			Expect(sc.Capabilities.Add).To(BeEmpty(), "container %s adds no capabilities", c.Name)
		}
		Expect(pod.OwnerReferences).To(ContainElement(HaveField("UID", final.UID)), "the pod is owned by the session")

		res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: pod.Name, Command: []string{"sh", "-c", "id -u; cat /workspace/hello.py"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), "stderr: %s", res.Stderr)
		Expect(res.Stdout).To(Equal("65532\nprint('Hello from e2e')\n"), "the workspace runs as non-root and holds the edited file")

		Expect(f.Client.Delete(ctx, final)).To(Succeed())
		Expect(f.WaitForGone(ctx, &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.Name}}, 2*time.Minute)).To(Succeed(),
			"the finalizer is removed")
		Expect(f.WaitForGone(ctx, pod, 2*time.Minute)).To(Succeed(), "the workspace pod is deleted with its session")
	}, SpecTimeout(3*time.Minute))

	It("ends a session whose model call fails with authentication in Failed, with a condition saying why", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-session")
		s := scriptedSession(ctx, ns, "unauthorized", failingScript)

		final := waitForFinalPhase(ctx, s)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseFailed))
		Expect(final.Status.Error).To(ContainSubstring("authentication"))
		completed := meta.FindStatusCondition(final.Status.Conditions, agentsv1.ConditionCompleted)
		Expect(completed).NotTo(BeNil(), "condition %s", agentsv1.ConditionCompleted)
		Expect(completed.Status).To(Equal(metav1.ConditionTrue), "a failed session is completed")
		Expect(completed.Reason).To(Equal(agentsv1.ReasonFailed))
		Expect(completed.Message).To(ContainSubstring("authentication"))
		ready := meta.FindStatusCondition(final.Status.Conditions, agentsv1.ConditionReady)
		Expect(ready).NotTo(BeNil(), "condition %s", agentsv1.ConditionReady)
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))

		// The pod of a failed session is released.
		Eventually(func(ctx context.Context) ([]corev1.Pod, error) {
			var pods corev1.PodList
			err := f.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{agentsv1.LabelSession: s.Name})
			return pods.Items, err
		}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(500*time.Millisecond).Should(BeEmpty(),
			"the workspace pod of a failed session is deleted")
	}, SpecTimeout(3*time.Minute))
})

// scriptedSession creates the script's ConfigMap and an AgentSession replaying it, changed by
// mutate before it is created.
func scriptedSession(ctx context.Context, ns, name, script string, mutate ...func(*agentsv1.AgentSession)) *agentsv1.AgentSession {
	GinkgoHelper()
	return scriptedSessionOf(ctx, ns, name, createScript(ctx, ns, name, script), mutate...)
}

// createScript creates the ConfigMap of session name's script in ns and returns its name.
func createScript(ctx context.Context, ns, name, script string) string {
	GinkgoHelper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-script"},
		Data:       map[string]string{"script.yaml": script},
	}
	Expect(f.Client.Create(ctx, cm)).To(Succeed())
	return cm.Name
}

// scriptedSessionOf is scriptedSession with its script's ConfigMap, cm, created already.
func scriptedSessionOf(ctx context.Context, ns, name, cm string, mutate ...func(*agentsv1.AgentSession)) *agentsv1.AgentSession {
	GinkgoHelper()
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: "Write hello.py that prints a greeting, edit it, then run it.",
			Model: agentsv1.ModelSpec{
				Provider:           agentsv1.ProviderScripted,
				Name:               "demo",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: cm, Key: "script.yaml"},
			},
			Limits: agentsv1.Limits{MaxTurns: 10, Deadline: &metav1.Duration{Duration: 10 * time.Minute}},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	Expect(f.Client.Create(ctx, s)).To(Succeed())
	deleteSessionAtCleanup(ns, name)
	return s
}

// deleteSessionAtCleanup registers the deletion of session ns/name, waiting until its
// finalizer is done. Cleanups run before AfterAll uninstalls the operator; a finalizer left
// for after that would keep the spec's namespace Terminating.
func deleteSessionAtCleanup(ns, name string) {
	DeferCleanup(func(ctx context.Context) {
		s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		Expect(client.IgnoreNotFound(f.Client.Delete(ctx, s))).To(Succeed(), "delete session %s/%s", ns, name)
		Expect(f.WaitForGone(ctx, s, 2*time.Minute)).To(Succeed())
	}, NodeTimeout(3*time.Minute))
}

// deleteAllSessions deletes every session of ns and waits until their finalizers are done.
func deleteAllSessions(ctx context.Context, ns string) error {
	// One delete per session, a few at a time: a deletecollection of hundreds of sessions on
	// a busy API server can outlast the request's timeout (seen as a Timeout or a reset
	// stream), while single deletes are quick and a failed one is simply asked again.
	for attempt := 1; ; attempt++ {
		var l agentsv1.AgentSessionList
		err := f.Client.List(ctx, &l, client.InNamespace(ns))
		if err == nil {
			err = deleteEach(ctx, l.Items)
		}
		if err == nil {
			break
		}
		if attempt == 5 {
			return fmt.Errorf("delete sessions in %s: %w", ns, err)
		}
	}
	return f.WaitFor(ctx, 8*time.Minute, "sessions in "+ns+" to be deleted", func(ctx context.Context) (bool, error) {
		var l agentsv1.AgentSessionList
		if err := f.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return len(l.Items) == 0, nil
	})
}

// deleteEach deletes the sessions, eight at a time, ignoring those already gone.
func deleteEach(ctx context.Context, sessions []agentsv1.AgentSession) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 8)
	for i := range sessions {
		if sessions[i].DeletionTimestamp != nil {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := client.IgnoreNotFound(f.Client.Delete(ctx, &sessions[i])); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitForFinalPhase polls the session until it reaches Succeeded, Failed or Aborted, and
// (like `kubectl wait --for=condition=Completed`) until its Completed condition is True.
func waitForFinalPhase(ctx context.Context, s *agentsv1.AgentSession) *agentsv1.AgentSession {
	GinkgoHelper()
	got := &agentsv1.AgentSession{}
	Eventually(func(g Gomega, ctx context.Context) {
		g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
		g.Expect(got.Status.Phase.IsFinal()).To(BeTrue(), "phase %q", got.Status.Phase)
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, agentsv1.ConditionCompleted)).To(BeTrue(),
			"condition %s True", agentsv1.ConditionCompleted)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	GinkgoWriter.Printf("session %s/%s: phase=%s turns=%d toolCalls=%d error=%q result=%q\n",
		got.Namespace, got.Name, got.Status.Phase, got.Status.Turns, got.Status.ToolCalls, got.Status.Error, got.Status.Result)
	return got
}
