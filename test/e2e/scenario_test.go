//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// scenarioScript is the end-to-end scenario of seed 000 §9.13 as a scripted model: create
// hello.py, edit it, run it, a 100 000-character output (truncated for the model, whole in the
// events), a command that blocks until the test has steered the session, and `sleep 30` with a
// 1 s timeout. Each turn's expect checks what the model was given.
const scenarioScript = `turns:
  - toolCalls:
      - name: write_file
        arguments: {file_path: hello.py, content: "print('Hello World')\n"}
  - toolCalls:
      - name: edit_file
        arguments: {file_path: hello.py, old_string: "Hello World", new_string: "Hello from the scenario"}
  - toolCalls:
      - name: shell
        arguments: {command: "python3 hello.py"}
  - expect: {lastToolResultContains: "Hello from the scenario"}
    toolCalls:
      - name: shell
        arguments: {command: "python3 -c \"print('x' * 100000)\""}
  - expect: {lastToolResultContains: "[WARNING: Tool output was truncated."}
    toolCalls:
      - name: shell
        arguments: {command: "touch waiting; while [ ! -f release ]; do sleep 0.1; done; echo released", timeout_ms: 120000}
  - expect: {lastUserContains: "use tabs"}
    toolCalls:
      - name: shell
        arguments: {command: "sleep 30", timeout_ms: 1000}
  - expect: {lastToolResultContains: "Command timed out after 1000ms"}
    text: "Scenario done."
`

// kubectl runs $KUBECTL (make exports the cached one), else kubectl from PATH, against the
// suite's cluster, with stdin, and returns its stdout.
func kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	bin := os.Getenv("KUBECTL")
	if bin == "" {
		bin = "kubectl"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig())
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// The seed 000 §9.13 scenario the way a user runs it: kubectl apply, steering by appending a
// message, kubectl wait, kubectl get, the events read back with the plugin.
var _ = Describe("the seed 000 scenario through kubectl", Ordered, ContinueOnFailure, Label("scenario"), func() {
	op := withOperator("ao-scenario", "ao-scenario")

	It("creates, edits and runs hello.py, truncates a large output for the model only, takes a steer, and times out sleep 30", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-scenario")
		const name = "scenario"
		manifest := fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: scenario-script, namespace: %[1]s}
data:
  script.yaml: |
%[2]s
---
apiVersion: agent-operator.dev/v1alpha1
kind: AgentSession
metadata: {name: %[3]s, namespace: %[1]s, labels: {agent-operator.dev/class: e2e}}
spec:
  prompt: Create hello.py, edit it, run it, then follow my instructions.
  model: {provider: scripted, name: demo, scriptConfigMapRef: {name: scenario-script, key: script.yaml}}
  limits: {maxTurns: 20, deadline: 10m}
`, ns, indent(scenarioScript, "    "), name)
		out, err := kubectl(ctx, manifest, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Print(out)
		s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		deleteSessionAtCleanup(ns, name)

		// The blocking command is running: steer by appending a message, as a user would.
		waitForWorkspaceFile(ctx, s, "waiting")
		_, err = kubectl(ctx, "", "patch", "agentsession", name, "-n", ns, "--type=merge",
			"-p", `{"spec":{"messages":[{"name":"tabs","kind":"steer","text":"Please use tabs from now on."}]}}`)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega, ctx context.Context) {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
			g.Expect(s.Status.MessagesDelivered).To(ContainElement("tabs"))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		res, err := f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: s.Status.PodName, Command: []string{"touch", "/workspace/release"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), "stderr: %s", res.Stderr)

		_, err = kubectl(ctx, "", "wait", "--for=condition=Completed", "agentsession/"+name, "-n", ns, "--timeout=3m")
		Expect(err).NotTo(HaveOccurred(), "kubectl wait --for=condition=Completed")
		Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
		Expect(s.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", s.Status.Error)
		Expect(s.Status.Result).To(Equal("Scenario done."))
		Expect(s.Status.MessagesDelivered).To(Equal([]string{"tabs"}), "the steer is delivered exactly once")

		table, err := kubectl(ctx, "", "get", "ags", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Print(table)
		header := strings.Fields(strings.SplitN(table, "\n", 2)[0])
		Expect(header).To(ContainElements("NAME", "PHASE", "MODEL", "TURNS", "TOKENS", "AGE"))
		Expect(table).To(ContainSubstring("Succeeded"))

		res, err = f.Exec(ctx, framework.ExecOptions{Namespace: ns, Pod: s.Status.PodName, Command: []string{"cat", "/workspace/hello.py"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Stdout).To(Equal("print('Hello from the scenario')\n"))

		// The events hold what the model did not get: the whole 100 000-character output.
		raw, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), "logs", "--raw", "-n", ns, "--operator-namespace", op.ns, name)
		Expect(err).NotTo(HaveOccurred())
		Expect(raw.ExitCode).To(Equal(0), "kubectl agent logs --raw: %s", raw.Stderr)
		var whole, steered, timedOut bool
		for _, ev := range parseRawEvents(raw.Stdout) {
			switch {
			case ev.Kind == loop.EventToolCallEnd && strings.Contains(ev.Data.Output, strings.Repeat("x", 100000)+"\n"):
				whole = true
			case ev.Kind == loop.EventSteeringInjected && strings.Contains(ev.Data.Content, "use tabs"):
				steered = true
			case ev.Kind == loop.EventToolCallEnd && strings.Contains(ev.Data.Output, "timed out"):
				timedOut = true
			}
		}
		Expect(whole).To(BeTrue(), "a TOOL_CALL_END carries the untruncated 100 000-character output")
		Expect(steered).To(BeTrue(), "a STEERING_INJECTED event carries the appended message")
		Expect(timedOut).To(BeTrue(), "the sleep 30 call ends with the timeout message")

		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.Status.PodName}}
		Expect(f.Client.Delete(ctx, s)).To(Succeed())
		Expect(f.WaitForGone(ctx, pod, 2*time.Minute)).To(Succeed(), "deleting the session removes its pod")
	}, SpecTimeout(8*time.Minute))
})

// indent prefixes every line of s with prefix.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}
