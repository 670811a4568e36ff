//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/agent-operator/agent-operator/test/e2e/framework"
)

// benchReplicaSessions is how many sessions each run of the replicas benchmark creates
// (BENCH_REPLICA_SESSIONS overrides 60).
func benchReplicaSessions() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_REPLICA_SESSIONS")); err == nil && n > 0 {
		return n
	}
	return 60
}

// Issue 21: what more replicas buy, and how long a killed replica's sessions wait. One install
// on an external NATS with the chart's default claim and membership durations; the same batch
// of sessions with one replica, then with three, then with three of which one is SIGKILLed
// mid-run. Every run is also checked like the replicas spec (all Succeeded, every step run
// once, gap-free journals); the numbers are reported, not asserted.
var _ = Describe("replica throughput and takeover", Ordered, Label("bench"), func() {
	const release = "ao-bench-replicas"
	op := withExternalNATS(release, "ao-bench-replicas-nats", startNATS)

	It("completes the same sessions with 1 and 3 replicas, and takes a SIGKILLed replica's sessions over", func(ctx SpecContext) {
		const steps = 10
		n := benchReplicaSessions()
		perMinute := func(r *replicaRun) float64 { return float64(len(r.sessions)) / r.elapsed.Minutes() }

		one := startReplicaRun(ctx, "ao-bench-r1", n, steps, 0)
		one.expectSucceededOnce(ctx, op.plugin, op.url)

		root, err := framework.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		out, err := helm(ctx, "upgrade", release, filepath.Join(root, "charts", "agent-operator"), "--namespace", op.ns,
			"--reuse-values", "--set", "replicaCount=3", "--wait", "--timeout", "5m")
		Expect(err).NotTo(HaveOccurred(), "helm upgrade to 3 replicas:\n%s", out)
		Eventually(func(g Gomega, ctx context.Context) {
			pods, err := managerPods(ctx, op.ns, release)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods).To(HaveLen(3))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Succeed())

		three := startReplicaRun(ctx, "ao-bench-r3", n, steps, 0)
		three.expectSucceededOnce(ctx, op.plugin, op.url)

		killed := startReplicaRun(ctx, "ao-bench-rk", n, steps, 1)
		killed.waitDriven(ctx, n/3)
		_, takeovers := killed.killBusiest(ctx)
		killed.expectSucceededOnce(ctx, op.plugin, op.url)

		benchRow(fmt.Sprintf("completed sessions per minute, %d sessions of %d tool calls: 1 / 3 replicas (issue 21)", n, steps),
			fmt.Sprintf("%.0f / %.0f (finished by %v)", perMinute(one), perMinute(three), three.finishedBy()),
			"3 >= 1 given cores to spread over")
		benchRow("takeover of a SIGKILLed replica's running sessions, claim re-acquired (chart defaults)",
			quantiles(takeovers), "p99 <= sessionClaimDuration + 5s")
	}, SpecTimeout(45*time.Minute))
})
