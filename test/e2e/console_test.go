//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

const consoleRelease = "ao-console"

// consoleSteer is the steer message the browser sends (web/console/e2e/console.e2e.mjs).
const consoleSteer = "Please also update the changelog."

// consoleScript says something, runs a command, spawns a child that answers, waits for it, then
// keeps running short commands (a window of minutes in which a steer is delivered within
// seconds and an abort lands) until the browser aborts it.
func consoleScript(parent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `turns:
  - text: "Looking at the repository."
    toolCalls:
      - name: shell
        arguments: {command: "echo hello-console"}
  - toolCalls:
      - name: spawn_agent
        arguments: {task: "console child: say hi"}
  - toolCalls:
      - name: wait
        arguments: {agent_id: %s-sub-1}
`, parent)
	for i := range 150 { // each command differs, or loop detection would warn about them
		fmt.Fprintf(&b, "  - toolCalls:\n      - name: shell\n        arguments: {command: \"sleep 2; echo tick %d\"}\n", i)
	}
	b.WriteString(`  - text: "The browser never aborted me."
agents:
  - match: "console child:"
    turns:
      - text: "hi from the child"
`)
	return b.String()
}

// Issue 23: the console in a real browser. `kubectl agent ui` runs on this machine with the
// suite's kubeconfig against the real cluster; Playwright (playwright-core, installed by
// `make ui`) drives Debian's Chromium through web/console/e2e/console.e2e.mjs, which writes
// screenshots of the list and session pages to _output/.
var _ = Describe("console in a browser", Ordered, Label("console"), func() {
	op := withOperator(consoleRelease, consoleRelease)

	It("streams a session's text and tool output, opens its child from the tree, delivers a steer and aborts it", func(ctx SpecContext) {
		root, err := framework.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		chromium := os.Getenv("CHROMIUM")
		if chromium == "" {
			chromium = "/usr/bin/chromium"
		}
		Expect(chromium).To(BeAnExistingFile(), "Debian's chromium (make bootstrap installs it)")
		Expect(filepath.Join(root, "web/console/node_modules/playwright-core")).To(BeADirectory(), "make ui installs playwright-core")
		Expect(filepath.Join(root, "cmd/kubectl-agent/ui/dist/index.html")).To(BeAnExistingFile(),
			"make ui builds the console before the suite builds the plugin")

		ns := f.SpecNamespace(ctx, "ao-console")
		const name = "console"
		s := scriptedSession(ctx, ns, name, consoleScript(name), func(s *agentsv1.AgentSession) {
			s.Spec.Limits.MaxTurns = 200
		})

		consoleURL := startConsole(ctx, op, ns)
		node := exec.CommandContext(ctx, "node", filepath.Join(root, "web/console/e2e/console.e2e.mjs"))
		node.Dir = filepath.Join(root, "web/console")
		node.Env = append(os.Environ(), "CONSOLE_URL="+consoleURL, "NAMESPACE="+ns, "PARENT="+name,
			"CHILD="+name+"-sub-1", "OUT_DIR="+filepath.Join(root, "_output"), "CHROMIUM="+chromium)
		out, err := node.CombinedOutput()
		GinkgoWriter.Printf("%s\n", out)
		Expect(err).NotTo(HaveOccurred(), "the browser steps (screenshot of a failure: _output/console-failure.png)")
		// Reported, never asserted (issue 23's target: p99 under 200 ms on the dev cluster).
		for _, line := range strings.Split(string(out), "\n") {
			if _, lat, ok := strings.Cut(line, "publish-to-page latency: "); ok {
				AddReportEntry("console publish-to-page latency", lat)
				benchRow("console: event publish to the page's next frame (live data parts)", lat, "p99 < 200ms")
			}
		}

		// What the browser saw is what the cluster did.
		final := waitForOutcome(ctx, s, 3*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseAborted), "status.error=%q", final.Status.Error)
		evs, _ := sessionEvents(ctx, op, final)
		var steered bool
		for _, ev := range eventsOfKind(evs, loop.EventSteeringInjected) {
			steered = steered || strings.Contains(ev.Data.Content, consoleSteer)
		}
		Expect(steered).To(BeTrue(), "the steer from the browser reached the loop")
		for _, shot := range []string{"console-list.png", "console-session.png"} {
			Expect(filepath.Join(root, "_output", shot)).To(BeAnExistingFile())
		}
	}, SpecTimeout(10*time.Minute))
})

// startConsole runs `kubectl agent ui` for ns with the suite's kubeconfig until the spec ends
// and returns the URL it printed (with its token).
func startConsole(ctx context.Context, op *operator, ns string) string {
	GinkgoHelper()
	ui := exec.Command(op.plugin, "ui", "-n", ns, "--operator-namespace", op.ns)
	ui.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig(), "CI=true")
	ui.Stderr = GinkgoWriter
	stdout, err := ui.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	Expect(ui.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = ui.Process.Signal(syscall.SIGTERM)
		_ = ui.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		defer GinkgoRecover()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "Console: "); ok {
				lines <- u
			}
		}
	}()
	select {
	case u := <-lines:
		return u
	case <-time.After(time.Minute):
		Fail("kubectl agent ui printed no URL within a minute")
	case <-ctx.Done():
		Fail("spec ended before kubectl agent ui printed its URL")
	}
	return ""
}
