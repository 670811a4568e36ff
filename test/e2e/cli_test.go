//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// cliRelease is the Helm release of the plugin specs (see resumeRelease on collisions).
const cliRelease = "ao-cli"

// The kubectl plugin as a CI pipeline uses it: the real binary, the cluster's kubeconfig,
// events read through a port-forward to the manager's embedded NATS.
var _ = Describe("kubectl agent plugin against the installed operator", Ordered, ContinueOnFailure, Label("cli"), func() {
	op := withOperator(cliRelease, "ao-cli")

	// runPlugin runs `kubectl agent run` for a scripted session in ns and registers the
	// session's deletion while the operator still runs (its finalizer needs the operator).
	runPlugin := func(ctx context.Context, ns, name, script string, args ...string) framework.PluginResult {
		GinkgoHelper()
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-script"},
			Data:       map[string]string{"script.yaml": script},
		}
		Expect(f.Client.Create(ctx, cm)).To(Succeed())
		deleteSessionAtCleanup(ns, name)
		all := append([]string{"run", "-n", ns, "--operator-namespace", op.ns, "--name", name, "--class", framework.SessionClass,
			"--provider", "scripted", "--model", "demo", "--script-configmap", cm.Name + "/script.yaml",
			"--max-turns", "10", "--timeout", "3m"}, args...)
		all = append(all, "Write hello.py that prints a greeting, edit it, then run it.")
		res, err := framework.RunPlugin(ctx, op.plugin, kubeconfig(), all...)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("kubectl agent %v: exit %d\nstdout:\n%s\nstderr:\n%s\n", all, res.ExitCode, res.Stdout, res.Stderr)
		return res
	}

	It("run --wait exits 0 for a succeeding scripted session and prints its result", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-cli")
		res := runPlugin(ctx, ns, "cli-ok", helloScript, "--wait")
		Expect(res.ExitCode).To(Equal(0))
		Expect(res.Stdout).To(Equal("Done: hello.py prints Hello from e2e.\n"))
		Expect(res.Stderr).To(ContainSubstring("agentsession cli-ok: Succeeded"))
	}, SpecTimeout(5*time.Minute))

	It("run --wait exits non-zero for a session whose model call fails with 401", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-cli")
		res := runPlugin(ctx, ns, "cli-unauthorized", failingScript, "--wait")
		Expect(res.ExitCode).To(Equal(2), "the exit code of a Failed session")
		Expect(res.Stderr).To(ContainSubstring("agentsession cli-unauthorized: Failed"))
		Expect(res.Stderr).To(ContainSubstring("authentication"))
	}, SpecTimeout(5*time.Minute))

	It("run --follow prints the events live and exits non-zero when an expectation of the script fails", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-cli")
		// The script expects the run to print a text it does not print.
		script := `turns:
  - text: "Running it."
    toolCalls:
      - name: shell
        arguments: {command: "echo hello from the workspace"}
  - expect: {lastToolResultContains: "a text that was never printed"}
    text: "unreachable"
`
		res := runPlugin(ctx, ns, "cli-expect", script, "--follow")
		Expect(res.ExitCode).To(Equal(2), "the exit code of a Failed session")
		Expect(res.Stdout).To(ContainSubstring("◆ assistant: Running it."))
		Expect(res.Stdout).To(ContainSubstring("⚙ shell"))
		Expect(res.Stdout).To(ContainSubstring("│ hello from the workspace"))
		Expect(res.Stdout).To(ContainSubstring("■ session ended"))
		Expect(res.Stdout).NotTo(ContainSubstring("unreachable"))
		Expect(res.Stderr).To(ContainSubstring("agentsession cli-expect: Failed"))
	}, SpecTimeout(5*time.Minute))

	It("run --follow exits 0 for a succeeding session after printing the whole story", func(ctx SpecContext) {
		ns := f.SpecNamespace(ctx, "ao-cli")
		res := runPlugin(ctx, ns, "cli-follow", helloScript, "--follow")
		Expect(res.ExitCode).To(Equal(0))
		for _, want := range []string{"▶ user: Write hello.py", "⚙ write_file", "⚙ edit_file", "⚙ shell", "│ Hello from e2e",
			"◆ assistant: Done: hello.py prints Hello from e2e.", "■ session ended (IDLE)"} {
			Expect(res.Stdout).To(ContainSubstring(want))
		}
		Expect(res.Stderr).To(ContainSubstring("agentsession cli-follow: Succeeded"))
	}, SpecTimeout(5*time.Minute))
})
