package metrics

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

// alertsFile is the chart's rule file; testdata/alerts_test.yaml unit-tests it.
var alertsFile = filepath.Join("..", "..", "charts", "agent-operator", "files", "alerts.yaml")

// promtool returns the path of promtool. Without it the test is skipped,
// except in CI (the CI variable is set), where it fails: make bootstrap
// installs it there (Debian's prometheus package).
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatal("promtool is not on PATH and CI is set: install Debian's prometheus package (make bootstrap as root)")
	}
	t.Skip("promtool is not on PATH: install Debian's prometheus package (apt-get install prometheus, or make bootstrap as root) to run this test")
	return ""
}

func runPromtool(t *testing.T, stdin []byte, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

// populated is a registry on which every metric of the package has series.
func populated(t *testing.T) *prometheus.Registry {
	t.Helper()
	r, reg := newRecorder(t)
	play(t, r, script)
	r.SessionEnded("team-a", "Failed", "CostBudgetExceeded", time.Minute)
	r.ExecStreamReconnected("team-a")
	r.ObserveJournalPublish(time.Millisecond, nil)
	r.SetJournalAvailable(true)
	r.SetWarmPoolPods("team-a", 2)
	r.WarmPoolClaim("team-a", true)
	r.LLMRetryHook("anthropic")(1, nil, 0)
	r.SessionStartStage(StageExecHandshake, 4*time.Millisecond)
	if err := r.CollectSessions(func() ([]SessionPhase, error) {
		return []SessionPhase{{Namespace: "team-a", Phase: "Running", Since: t0}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.CollectDriven(func() int { return 3 }); err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestExpositionPassesPromtool checks the exposition of every metric with
// `promtool check metrics` (and client_golang's linter, which needs no
// binary).
func TestExpositionPassesPromtool(t *testing.T) {
	reg := populated(t)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != len(allMetrics) {
		t.Errorf("%d metric families exposed, want %d (allMetrics)", len(mfs), len(allMetrics))
	}
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	runPromtool(t, text.Bytes(), "check", "metrics")
}

// TestAlertRules checks the chart's rule file and runs its unit tests.
func TestAlertRules(t *testing.T) {
	runPromtool(t, nil, "check", "rules", alertsFile)
	runPromtool(t, nil, "test", "rules", filepath.Join("testdata", "alerts_test.yaml"))
}
