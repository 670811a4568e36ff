//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/mcp/mcptest"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

const (
	mcpRelease    = "ao-mcp"
	mcpServerName = "mcpserver"
	mcpServerPort = 8080
)

// mcpScript calls a tool of the in-cluster server, then one of the stdio server in the
// workspace, then the stdio one with arguments its schema refuses, then a tool the policy
// denies by wildcard; each turn checks the previous result, so the session only succeeds if
// every result reached the model as expected.
const mcpScript = `turns:
  - toolCalls:
      - name: mcp__cluster__echo
        arguments: {text: "from the cluster"}
  - expect: {lastToolResultContains: "echo: from the cluster"}
    toolCalls:
      - name: mcp__ws__echo
        arguments: {text: "from the workspace"}
  - expect: {lastToolResultContains: "echo: from the workspace"}
    toolCalls:
      - name: mcp__ws__echo
        arguments: {text: 42}
  - expect: {lastToolResultContains: "text"}
    toolCalls:
      - name: mcp__cluster__fail
        arguments: {}
  - expect: {lastToolResultContains: "denied"}
    text: "MCP done."
`

// Issue 22: MCP servers of both kinds in one session on a real cluster: a remote server (the
// SDK's streamable HTTP) reached from the manager, and a stdio server run inside the workspace
// pod over the session's exec stream.
var _ = Describe("MCP servers", Ordered, Label("mcp"), func() {
	op := withOperator(mcpRelease, mcpRelease)

	It("calls a tool on an in-cluster server and one on a stdio server in the workspace; policy and schema refusals reach the model", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-mcp")
		url := deployMCPServer(ctx, ns)
		s := scriptedSession(ctx, ns, "mcp", mcpScript, func(s *agentsv1.AgentSession) {
			s.Spec.Workspace.Image = framework.MCPServerImage
			s.Spec.Tools.MCPServers = []agentsv1.MCPServer{
				{Name: "cluster", URL: url},
				{Name: "ws", Command: []string{"/mcpserver", "-stdio"}},
			}
			s.Spec.Tools.Policy = &agentsv1.ToolPolicy{Rules: []agentsv1.ToolPolicyRule{
				{Tool: "mcp__*__fail", Action: agentsv1.PolicyDeny}}}
		})
		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("MCP done."))
		servers := map[string]agentsv1.MCPServerStatus{}
		for _, st := range final.Status.MCPServers {
			servers[st.Name] = st
		}
		Expect(servers).To(HaveKey("cluster"))
		Expect(servers).To(HaveKey("ws"))
		GinkgoWriter.Printf("status.mcpServers: %+v\n", final.Status.MCPServers)

		evs, _ := sessionEvents(ctx, op, final)
		ends := eventsOfKind(evs, loop.EventToolCallEnd)
		Expect(ends).To(HaveLen(4))
		Expect(ends[0].Data.Output).To(ContainSubstring("echo: from the cluster"))
		Expect(ends[1].Data.Output).To(ContainSubstring("echo: from the workspace"))
		Expect(ends[2].Data.Error).NotTo(BeEmpty(), "the schema refuses a number for text")
		Expect(ends[3].Data.Error).To(ContainSubstring("denied"))
	}, SpecTimeout(6*time.Minute))

	It("reports an MCP call cut by a manager kill as interrupted and never makes it again", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-mcp-kill")
		url := deployMCPServer(ctx, ns)
		pods, err := managerPods(ctx, op.ns, mcpRelease)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).To(HaveLen(1), "one manager pod")
		s := scriptedSession(ctx, ns, "mcpkill", mcpKillScript, func(s *agentsv1.AgentSession) {
			// The slow tool answers only when its call is cancelled: the kill must cut it, not
			// the server's timeout.
			s.Spec.Tools.MCPServers = []agentsv1.MCPServer{{Name: "cluster", URL: url, Timeout: &metav1.Duration{Duration: 10 * time.Minute}}}
		})
		Eventually(func(g Gomega, ctx context.Context) {
			cur := &agentsv1.AgentSession{}
			if err := f.Client.Get(ctx, client.ObjectKeyFromObject(s), cur); err == nil && cur.Status.Phase.IsFinal() {
				StopTrying(fmt.Sprintf("session ended %s before the call: %s", cur.Status.Phase, cur.Status.Error)).Now()
			}
			g.Expect(mcpCalls(ctx, ns)).To(HaveKeyWithValue(mcptest.Slow, 1))
		}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), "the MCP server receives the call")
		GinkgoWriter.Printf("killing manager pod %s during the MCP call\n", pods[0].Name)
		killManager(ctx, op.ns, mcpRelease, pods[0])

		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Result).To(Equal("Told the user."))
		evs, _ := sessionEvents(ctx, op, final)
		Expect(eventsOfKind(evs, loop.EventToolCallStart)).To(HaveLen(1), "the call is started once")
		ends := eventsOfKind(evs, loop.EventToolCallEnd)
		Expect(ends).To(HaveLen(1))
		Expect(ends[0].Data.Error).To(Equal(loop.InterruptedResult), "the resumed session reports the cut call as interrupted")
		Expect(mcpCalls(ctx, ns)).To(HaveKeyWithValue(mcptest.Slow, 1), "the new manager never calls the tool again")
	}, SpecTimeout(8*time.Minute))

	It("fetches an in-cluster page from the workspace with web_fetch; refuses an address the session does not allow; cuts a 50 MB page", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-webfetch")
		url := deployMCPServer(ctx, ns)
		svcIP := strings.TrimPrefix(strings.Split(url, ":")[1], "//")
		pod := &corev1.Pod{}
		Expect(f.Client.Get(ctx, objectKey(ns, mcpServerName), pod)).To(Succeed())
		Expect(pod.Status.PodIP).NotTo(BeEmpty())
		base := func(host string) string { return fmt.Sprintf("http://%s:%d", host, mcpServerPort) }
		s := scriptedSession(ctx, ns, "webfetch", webFetchScript(base(svcIP)+"/page.html", base(pod.Status.PodIP)+"/page.html", base(svcIP)+"/big.txt"),
			func(s *agentsv1.AgentSession) {
				s.Spec.Tools.WebFetch = &agentsv1.WebFetchSpec{Enabled: true, MaxBytes: 1 << 20}
				s.Spec.Workspace.AllowedEgressHosts = []string{svcIP}
			})
		final := waitForOutcome(ctx, s, 4*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		evs, _ := sessionEvents(ctx, op, final)
		ends := eventsOfKind(evs, loop.EventToolCallEnd)
		Expect(ends).To(HaveLen(3))
		Expect(ends[0].Data.Output).NotTo(ContainSubstring("stealCookies"), "scripts are dropped")
		for i, ev := range ends {
			GinkgoWriter.Printf("web_fetch %d: error=%q output=%.200q\n", i+1, ev.Data.Error, ev.Data.Output)
		}
	}, SpecTimeout(6*time.Minute))
})

// mcpKillScript calls the remote server's slow tool (cut by a manager kill in the spec); the
// next turn succeeds only if the model was told the call was interrupted.
const mcpKillScript = `turns:
  - toolCalls:
      - name: mcp__cluster__slow
        arguments: {}
  - expect: {lastToolResultContains: "interrupted"}
    text: "Told the user."
`

// mcpCalls returns how often each tool of the MCP server in ns was called (its /calls
// endpoint, read through the API server's pod proxy).
func mcpCalls(ctx context.Context, ns string) (map[string]int, error) {
	raw, err := f.Clientset.CoreV1().Pods(ns).ProxyGet("http", mcpServerName, fmt.Sprint(mcpServerPort), "calls", nil).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("get /calls of the MCP server: %w", err)
	}
	calls := map[string]int{}
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, fmt.Errorf("decode /calls %q: %w", raw, err)
	}
	return calls, nil
}

// webFetchScript fetches an allowed in-cluster page, the same server by an address the session
// does not allow, and a 50 MB page; each turn checks the previous result.
func webFetchScript(page, refused, big string) string {
	return fmt.Sprintf(`turns:
  - toolCalls:
      - name: web_fetch
        arguments: {url: %q}
  - expect: {lastToolResultContains: "The answer is 42"}
    toolCalls:
      - name: web_fetch
        arguments: {url: %q}
  - expect: {lastToolResultContains: "not allowed"}
    toolCalls:
      - name: web_fetch
        arguments: {url: %q}
  - expect: {lastToolResultContains: "only its first 1048576 bytes were read"}
    text: "Fetched."
`, page, refused, big)
}

// deployMCPServer runs the test MCP server (streamable HTTP) as a pod and Service in ns and
// returns its URL.
func deployMCPServer(ctx context.Context, ns string) string {
	GinkgoHelper()
	labels := map[string]string{"app": mcpServerName}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: mcpServerName, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			AutomountServiceAccountToken:  new(bool),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   new(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            mcpServerName,
				Image:           framework.MCPServerImage,
				ImagePullPolicy: framework.ImagePullPolicy,
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: mcpServerPort}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(mcpServerPort)}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: new(bool),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	Expect(f.Client.Create(ctx, pod)).To(Succeed())
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: mcpServerName},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: mcpServerPort, TargetPort: intstr.FromInt32(mcpServerPort)}},
		},
	}
	Expect(f.Client.Create(ctx, svc)).To(Succeed())
	_, err := f.WaitForPodRunning(ctx, ns, pod.Name, 2*time.Minute)
	Expect(err).NotTo(HaveOccurred(), "the MCP server becomes ready")
	Expect(svc.Spec.ClusterIP).NotTo(BeEmpty())
	return fmt.Sprintf("http://%s:%d/mcp", svc.Spec.ClusterIP, mcpServerPort)
}
