//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/runner"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// llmFaultsRelease is the Helm release of the specs that talk to the in-cluster LLM test
// server (see resumeRelease on collisions).
const llmFaultsRelease = "ao-llmfaults"

// llmServerName names the pod, Service and script ConfigMap of deployLLMServer.
const llmServerName = "llmserver"

// llmServerPort is the port test/llmserver listens on.
const llmServerPort = 8080

// stormScript answers each of its two turns only after failing: the first with HTTP 429 twice
// (asking for a 200 ms wait with Retry-After), the second with HTTP 500 twice (no Retry-After:
// the client's own backoff). The default retry policy (4 attempts) rides both out.
const stormScript = `turns:
  - text: "Checking the workspace."
    toolCalls:
      - name: shell
        arguments: {command: "echo survived the storm"}
    error: {kind: rate_limit, times: 2, retryAfterMs: 200}
  - expect: {lastToolResultContains: "survived the storm"}
    text: "Done after the storm."
    error: {kind: server, statusCode: 500, times: 2}
`

// rateLimitedScript answers every request with HTTP 429 and no Retry-After.
const rateLimitedScript = `turns:
  - error: {kind: rate_limit, message: "rate limit exceeded, slow down"}
`

// llmRequest is one entry of the llmserver's GET /requests.
type llmRequest struct {
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
	Status int         `json:"status"`
}

// deployLLMServer runs test/llmserver in ns serving one script per entry of scripts (the key
// is the script's name: it is served under /<name>/<protocol>) and returns the server's root
// URL. The URL uses the Service's ClusterIP, since the local cluster has no DNS.
func deployLLMServer(ctx context.Context, ns string, scripts map[string]string) string {
	GinkgoHelper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: llmServerName + "-scripts"}, Data: map[string]string{}}
	for name, script := range scripts {
		cm.Data[name+".yaml"] = script
	}
	Expect(f.Client.Create(ctx, cm)).To(Succeed())

	labels := map[string]string{"app": llmServerName}
	zero := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: llmServerName, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  new(bool),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   new(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            llmServerName,
				Image:           framework.LLMServerImage,
				ImagePullPolicy: framework.ImagePullPolicy,
				Args:            []string{"--listen", fmt.Sprintf(":%d", llmServerPort), "--script", "/scripts"},
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: llmServerPort}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(llmServerPort)}},
					PeriodSeconds: 1,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "scripts", MountPath: "/scripts", ReadOnly: true}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: new(bool),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Volumes: []corev1.Volume{{Name: "scripts", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}},
			}}},
		},
	}
	Expect(f.Client.Create(ctx, pod)).To(Succeed())
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: llmServerName},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: llmServerPort, TargetPort: intstr.FromInt32(llmServerPort)}},
		},
	}
	Expect(f.Client.Create(ctx, svc)).To(Succeed())
	_, err := f.WaitForPodRunning(ctx, ns, pod.Name, 2*time.Minute)
	Expect(err).NotTo(HaveOccurred())
	Expect(svc.Spec.ClusterIP).NotTo(BeEmpty(), "the Service's ClusterIP")
	return fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, llmServerPort)
}

// llmRequests returns the model requests the llmserver in ns answered so far, read through the
// API server's pod proxy.
func llmRequests(ctx context.Context, ns string) []llmRequest {
	GinkgoHelper()
	raw, err := f.Clientset.CoreV1().Pods(ns).ProxyGet("http", llmServerName, fmt.Sprint(llmServerPort), "requests", nil).DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred(), "GET /requests of the llmserver")
	var reqs []llmRequest
	Expect(json.Unmarshal(raw, &reqs)).To(Succeed(), "GET /requests: %s", raw)
	return reqs
}

// statusesOf returns the HTTP statuses of the requests whose path starts with prefix, in order.
func statusesOf(reqs []llmRequest, prefix string) []int {
	var out []int
	for _, r := range reqs {
		if strings.HasPrefix(r.Path, prefix) {
			out = append(out, r.Status)
		}
	}
	return out
}

// llmSession creates an Anthropic session named name whose model is the llmserver script of
// the same name at root, with its API key in a Secret, and registers the session's deletion
// while the operator still runs (its finalizer needs the operator).
func llmSession(ctx context.Context, ns, name, root, apiKey, prompt string, mutate ...func(*agentsv1.AgentSession)) *agentsv1.AgentSession {
	GinkgoHelper()
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-llm",
			Labels: map[string]string{runner.LabelLLMCredentials: "true"}}, // opted in as an API key
		StringData: map[string]string{"api-key": apiKey},
	}
	Expect(f.Client.Create(ctx, sec)).To(Succeed())
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: agentsv1.AgentSessionSpec{
			Prompt: prompt,
			Model: agentsv1.ModelSpec{
				Provider:        agentsv1.ProviderAnthropic,
				Name:            "claude-sonnet-4-5",
				BaseURL:         root + "/" + name + "/anthropic",
				APIKeySecretRef: &agentsv1.SecretKeyRef{Name: sec.Name, Key: "api-key"},
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

// sessionEvents reads the session's events from NATS with `kubectl agent logs --raw` and
// returns them with the raw output.
func sessionEvents(ctx context.Context, op *operator, s *agentsv1.AgentSession) ([]loop.Event, string) {
	GinkgoHelper()
	raw, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), "logs", "--raw", "-n", s.Namespace, "--operator-namespace", op.ns, s.Name)
	Expect(err).NotTo(HaveOccurred())
	Expect(raw.ExitCode).To(Equal(0), "kubectl agent logs --raw: %s", raw.Stderr)
	evs := parseRawEvents(raw.Stdout)
	Expect(events.CheckSequence(evs)).To(Succeed())
	return evs, raw.Stdout
}

// eventsOfKind returns the events of kind k.
func eventsOfKind(evs []loop.Event, k loop.EventKind) []loop.Event {
	var out []loop.Event
	for _, ev := range evs {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// A model provider that fails, and a key that must not leak: the session talks to test/llmserver
// over the real Anthropic wire protocol through the real adapter, as it would to the provider.
var _ = Describe("sessions against the in-cluster LLM test server", Ordered, ContinueOnFailure, func() {
	op := withOperator(llmFaultsRelease, "ao-llmfaults")

	It("rides out a storm of HTTP 429 and 500 answers with retries and Succeeds", Label("chaos"), func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-llmstorm")
		root := deployLLMServer(ctx, ns, map[string]string{"storm": stormScript})
		s := llmSession(ctx, ns, "storm", root, "sk-e2e-storm-key", "Check the workspace.")

		final := waitForOutcome(ctx, s, 3*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("Done after the storm."))
		Expect(final.Status.Turns).To(BeEquivalentTo(2))
		Expect(final.Status.ToolCalls).To(BeEquivalentTo(1))

		// Each failed attempt was retried: two 429s, the answer, two 500s, the answer.
		Expect(statusesOf(llmRequests(ctx, ns), "/storm/anthropic/")).To(Equal([]int{429, 429, 200, 500, 500, 200}),
			"the statuses the llmserver sent, in order")

		// The retries stayed inside the model calls: the loop saw two answers and no error.
		evs, _ := sessionEvents(ctx, op, final)
		Expect(eventsOfKind(evs, loop.EventError)).To(BeEmpty(), "ERROR events")
		Expect(eventsOfKind(evs, loop.EventAssistantTextEnd)).To(HaveLen(2), "ASSISTANT_TEXT_END events")
		ends := eventsOfKind(evs, loop.EventToolCallEnd)
		Expect(ends).To(HaveLen(1))
		Expect(ends[0].Data.Output).To(ContainSubstring("survived the storm"))
	}, SpecTimeout(5*time.Minute))

	It("ends a session whose provider answers HTTP 429 to every attempt in Failed, saying it retried", Label("chaos"), func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-llmstorm")
		root := deployLLMServer(ctx, ns, map[string]string{"ratelimited": rateLimitedScript})
		// No outage tolerance: the session gives up after the client's own retries.
		s := llmSession(ctx, ns, "ratelimited", root, "sk-e2e-ratelimited-key", "Check the workspace.",
			func(s *agentsv1.AgentSession) { s.Spec.Limits.ModelOutageTolerance = &metav1.Duration{} })

		final := waitForOutcome(ctx, s, 3*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseFailed))
		Expect(final.Status.Turns).To(BeZero())
		// The default retry policy makes 4 attempts.
		Expect(statusesOf(llmRequests(ctx, ns), "/ratelimited/anthropic/")).To(Equal([]int{429, 429, 429, 429}),
			"the statuses the llmserver sent, in order")

		const why = "after 4 attempts: anthropic: rate_limit error (HTTP 429): rate limit exceeded, slow down"
		Expect(final.Status.Error).To(ContainSubstring(why))
		completed := meta.FindStatusCondition(final.Status.Conditions, agentsv1.ConditionCompleted)
		Expect(completed).NotTo(BeNil(), "condition %s", agentsv1.ConditionCompleted)
		Expect(completed.Status).To(Equal(metav1.ConditionTrue))
		Expect(completed.Reason).To(Equal(agentsv1.ReasonModelUnavailable))
		Expect(completed.Message).To(ContainSubstring(why))

		// The Warning event of the transition says why too.
		Eventually(func(g Gomega, ctx context.Context) {
			var list corev1.EventList
			g.Expect(f.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.InvolvedObject.Name == s.Name && e.Type == corev1.EventTypeWarning && e.Reason == string(agentsv1.PhaseFailed) {
					notes = append(notes, e.Message)
				}
			}
			g.Expect(notes).To(ContainElement(ContainSubstring(why)), "Warning events of the session")
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		evs, _ := sessionEvents(ctx, op, final)
		errs := eventsOfKind(evs, loop.EventError)
		Expect(errs).To(HaveLen(1), "one ERROR event, after the retries")
		Expect(errs[0].Data.ErrorKind).To(Equal("rate_limit"))
		Expect(errs[0].Data.Message).To(ContainSubstring(why))
	}, SpecTimeout(5*time.Minute))

	It("retries a stream cut mid-answer and records the answer exactly once", Label("chaos"), func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-llmcut")
		const answer = "The whole answer, streamed to the end."
		root := deployLLMServer(ctx, ns, map[string]string{"cut": `turns:
  - text: "` + answer + `"
    error: {kind: server, message: "connection reset mid-stream", midStream: true, times: 3}
`})
		s := llmSession(ctx, ns, "cut", root, "sk-e2e-cut-key", "Answer.")

		final := waitForOutcome(ctx, s, 3*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal(answer))
		Expect(final.Status.Turns).To(BeEquivalentTo(1))
		Expect(statusesOf(llmRequests(ctx, ns), "/cut/anthropic/")).To(HaveLen(4), "3 cut streams and the whole one")

		evs, _ := sessionEvents(ctx, op, final)
		ends := eventsOfKind(evs, loop.EventAssistantTextEnd)
		Expect(ends).To(HaveLen(1), "the answer is recorded once")
		Expect(ends[0].Data.Text).To(Equal(answer))
		restarts := 0
		for _, w := range eventsOfKind(evs, loop.EventWarning) {
			if w.Data.Message == loop.StreamRestartWarning {
				restarts++
			}
		}
		Expect(restarts).To(Equal(3), "a WARNING for each discarded partial answer")
		Expect(eventsOfKind(evs, loop.EventError)).To(BeEmpty(), "ERROR events")
	}, SpecTimeout(5*time.Minute))

	It("waits out a model outage as ModelUnavailable, then resumes and Succeeds", Label("chaos"), func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-llmoutage")
		// 12 answers of HTTP 529 (overloaded): three rounds of the client's 4 attempts, each
		// followed by a pause of the session, then the answer.
		root := deployLLMServer(ctx, ns, map[string]string{"outage": `turns:
  - text: "Back after the outage."
    error: {kind: server, statusCode: 529, code: overloaded_error, message: "Overloaded", times: 12}
`})
		s := llmSession(ctx, ns, "outage", root, "sk-e2e-outage-key", "Answer.")

		Eventually(func(g Gomega, ctx context.Context) {
			got := &agentsv1.AgentSession{}
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), got)).To(Succeed())
			c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionModelAvailable)
			g.Expect(c).NotTo(BeNil(), "condition %s", agentsv1.ConditionModelAvailable)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(agentsv1.ReasonModelUnavailable))
			g.Expect(c.Message).To(And(ContainSubstring("anthropic"), ContainSubstring("529")))
			g.Expect(got.Status.Phase).To(Equal(agentsv1.PhaseRunning), "a waiting session keeps running")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())

		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("Back after the outage."))
		c := meta.FindStatusCondition(final.Status.Conditions, agentsv1.ConditionModelAvailable)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionTrue))
		Expect(statusesOf(llmRequests(ctx, ns), "/outage/anthropic/")).To(HaveLen(13))
		evs, _ := sessionEvents(ctx, op, final)
		Expect(eventsOfKind(evs, loop.EventUserInput)).To(HaveLen(1))
		Expect(eventsOfKind(evs, loop.EventAssistantTextEnd)).To(HaveLen(1))
		Expect(eventsOfKind(evs, loop.EventError)).To(HaveLen(3), "one ERROR per pause")
	}, SpecTimeout(7*time.Minute))

	It("never shows the provider API key in manager logs, the session object, Kubernetes Events, the session's events or tool outputs", Label("security"), func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-llmsecret")
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		key := "sk-e2e-" + hex.EncodeToString(b)

		// The model looks for the key everywhere a tool can reach: the environment of the shell
		// and of PID 1, the service account directory, and the files of the workspace pod
		// (matched by pattern, so the command itself does not hold the key). Then it runs a
		// command and says a final text that do hold the key, as a model that had learnt it
		// might: both must be redacted wherever the operator shows them.
		script := fmt.Sprintf(`turns:
  - text: "Looking at the environment."
    toolCalls:
      - name: shell
        arguments: {command: "env; echo ---; tr '\\0' '\\n' < /proc/1/environ; echo; echo ---; ls -la /var/run/secrets/kubernetes.io/serviceaccount 2>&1; echo env-done"}
  - expect: {lastToolResultContains: "env-done"}
    text: "Scanning the files."
    toolCalls:
      - name: shell
        arguments: {command: "timeout 60 grep -rasoE 'sk-e2e-[0-9a-f]{24}' /workspace /tmp /etc /run /proc/self/environ /proc/1/environ /proc/1/cmdline 2>/dev/null | head -n 20; echo pattern-scan-done", timeout_ms: 90000}
  - expect: {lastToolResultContains: "pattern-scan-done"}
    text: "Looking for the literal key."
    toolCalls:
      - name: shell
        arguments: {command: "grep -rsF '%[1]s' /workspace /etc 2>/dev/null | head -n 20; echo literal-scan-done"}
  - expect: {lastToolResultContains: "literal-scan-done"}
    text: "Scan finished; the key would be %[1]s."
`, key)
		root := deployLLMServer(ctx, ns, map[string]string{"secretscan": script})
		s := llmSession(ctx, ns, "secretscan", root, key, "Find the provider API key.")

		final := waitForOutcome(ctx, s, 3*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.ToolCalls).To(BeEquivalentTo(3))

		// The manager did read the key and send it: every model request carried it.
		reqs := llmRequests(ctx, ns)
		Expect(reqs).To(HaveLen(4))
		for _, r := range reqs {
			Expect(r.Header.Get("X-Api-Key")).To(Equal(key), "X-Api-Key of %s %s", r.Method, r.Path)
		}

		// The session's events on NATS, tool outputs included.
		evs, raw := sessionEvents(ctx, op, final)
		Expect(raw).NotTo(ContainSubstring(key), "the session's events")
		Expect(raw).To(ContainSubstring(events.Redacted), "the key in the command and the final text was redacted")
		ends := eventsOfKind(evs, loop.EventToolCallEnd)
		Expect(ends).To(HaveLen(3))
		for _, end := range ends {
			Expect(end.Data.IsError).To(BeFalse(), "tool call %s: %s", end.Data.CallID, end.Data.Error)
			Expect(end.Data.Output).NotTo(ContainSubstring("sk-e2e-"), "no tool found the key")
			Expect(end.Data.Output).NotTo(ContainSubstring(events.Redacted), "no tool output needed redacting")
		}
		Expect(ends[0].Data.Output).To(And(ContainSubstring("PATH="), ContainSubstring("env-done")), "the environment was listed")
		Expect(ends[0].Data.Output).To(ContainSubstring("No such file or directory"), "no service account token is mounted")
		Expect(ends[1].Data.Output).To(HaveSuffix("\nOutput:\npattern-scan-done\n"), "the pattern scan found nothing")
		Expect(ends[2].Data.Output).To(HaveSuffix("\nOutput:\nliteral-scan-done\n"), "the literal scan found nothing")

		// The AgentSession as the API server stores it, status included.
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(agentsv1.GroupVersion.WithKind("AgentSession"))
		Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), u)).To(Succeed())
		obj, err := json.Marshal(u.Object)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(obj)).To(ContainSubstring(`"phase":"Succeeded"`))
		Expect(string(obj)).NotTo(ContainSubstring(key), "the AgentSession")

		// Kubernetes Events, core/v1 and events.k8s.io/v1, of the session's and the operator's
		// namespaces.
		for _, n := range []string{ns, op.ns} {
			core, err := f.Clientset.CoreV1().Events(n).List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(core.Items).NotTo(BeEmpty(), "core/v1 Events in %s", n)
			b, err := json.Marshal(core)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(b)).NotTo(ContainSubstring(key), "core/v1 Events in %s", n)
			ev, err := f.Clientset.EventsV1().Events(n).List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(ev.Items).NotTo(BeEmpty(), "events.k8s.io/v1 Events in %s", n)
			b, err = json.Marshal(ev)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(b)).NotTo(ContainSubstring(key), "events.k8s.io/v1 Events in %s", n)
		}

		// The logs of every container of the manager.
		pods, err := managerPods(ctx, op.ns, llmFaultsRelease)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).NotTo(BeEmpty())
		var all strings.Builder
		for _, p := range pods {
			for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
				logs, err := f.Clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
				Expect(err).NotTo(HaveOccurred(), "logs of %s/%s", p.Name, c.Name)
				GinkgoWriter.Printf("manager pod %s container %s: %d bytes of logs\n", p.Name, c.Name, len(logs))
				Expect(string(logs)).NotTo(ContainSubstring(key), "logs of %s/%s", p.Name, c.Name)
				all.Write(logs)
			}
		}
		Expect(all.String()).To(ContainSubstring(s.Name), "the manager logged about the session, so its logs were scanned")
	}, SpecTimeout(6*time.Minute))
})
