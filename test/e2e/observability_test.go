//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/pricing"
)

// obsRelease is the Helm release of the observability spec. Its price table prices the
// scripted model "demo" at $2 per million input and $8 per million output tokens, so cost
// is not zero.
const obsRelease = "ao-obs"

// obsScript: three model calls with known usage, two of them with a shell call.
const obsScript = `turns:
  - usage: {inputTokens: 1200, outputTokens: 100}
    toolCalls: [{name: shell, arguments: {command: "echo one"}}]
  - usage: {inputTokens: 1500, outputTokens: 150}
    toolCalls: [{name: shell, arguments: {command: "false"}}]
  - usage: {inputTokens: 1800, outputTokens: 50}
    text: "done"
`

// A real Prometheus scrapes the manager's /metrics (through a port-forward), and its query
// results for tokens, cost and tool calls equal what the session's status says.
var _ = Describe("metrics in a real Prometheus", Ordered, Label("observability"), func() {
	op := withOperator(obsRelease, "ao-obs-op",
		"pricing.models[0].provider=scripted", "pricing.models[0].model=demo",
		"pricing.models[0].input=2", "pricing.models[0].output=8")

	It("reports the tokens, cost and tool calls of a session as its status does", func(ctx SpecContext) {
		promBin, err := exec.LookPath("prometheus")
		Expect(err).NotTo(HaveOccurred(), "Debian's prometheus package (make test installs it)")

		ns := f.SpecNamespace(ctx, "ao-obs")
		s := scriptedSession(ctx, ns, "observed", obsScript)
		final := waitForOutcome(ctx, s, 3*time.Minute)
		Expect(final.Status.Phase).To(Equal(agentsv1.PhaseSucceeded), "status.error=%q", final.Status.Error)
		Expect(final.Status.Usage.Input).To(BeEquivalentTo(4500))
		Expect(final.Status.Usage.Output).To(BeEquivalentTo(300))
		Expect(final.Status.ToolCalls).To(BeEquivalentTo(2))
		// 4500 * $2/M + 300 * $8/M = $0.0114
		Expect(final.Status.Cost).To(Equal("0.011400"))
		Expect(final.Status.Currency).To(Equal("USD"))

		pods, err := managerPods(ctx, op.ns, obsRelease)
		Expect(err).NotTo(HaveOccurred())
		Expect(pods).NotTo(BeEmpty())
		metricsPort := forwardToPod(ctx, op.ns, pods[0].Name, 8080)
		prom := startPrometheus(ctx, promBin, fmt.Sprintf("127.0.0.1:%d", metricsPort))

		sel := fmt.Sprintf(`namespace=%q`, ns)
		want := map[string]float64{
			`sum(agent_operator_llm_tokens_total{` + sel + `,kind="input"})`:  float64(final.Status.Usage.Input),
			`sum(agent_operator_llm_tokens_total{` + sel + `,kind="output"})`: float64(final.Status.Usage.Output),
			`sum(agent_operator_turns_total{` + sel + `})`:                    float64(final.Status.Turns),
			// The install runs this one session: every tool call is its.
			`sum(agent_operator_tool_calls_total)`:                  float64(final.Status.ToolCalls),
			`sum(agent_operator_tool_calls_total{outcome="error"})`: 1,
		}
		cost, err := pricing.ParseAmount(final.Status.Cost)
		Expect(err).NotTo(HaveOccurred())
		want[`sum(agent_operator_llm_cost_total{`+sel+`})`] = float64(cost) / 1e9
		for q, v := range want {
			Eventually(func(g Gomega, ctx context.Context) {
				got, err := promQuery(ctx, prom, q)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(BeNumerically("~", v, 1e-9), "%s", q)
			}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(time.Second).Should(Succeed(), q)
			GinkgoWriter.Printf("%s = %v (status)\n", q, v)
		}
	}, SpecTimeout(6*time.Minute))
})

// startPrometheus runs Prometheus scraping target every second until the spec ends and
// returns its base URL.
func startPrometheus(ctx context.Context, bin, target string) string {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: agent-operator
    honor_labels: true
    static_configs: [{targets: [%q]}]
`, target)
	Expect(os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600)).To(Succeed())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	Expect(l.Close()).To(Succeed())
	pctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(pctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() { cancel(); _ = cmd.Wait() })
	base := "http://" + addr
	Eventually(func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("ready: %s", resp.Status)
		}
		return nil
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	return base
}

// promQuery runs an instant query that returns one sample and returns its value.
func promQuery(ctx context.Context, base, q string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", q, body.Error)
	}
	if len(body.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: %d samples", q, len(body.Data.Result))
	}
	v, _ := body.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(v, 64)
}
