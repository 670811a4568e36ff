package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	"github.com/agent-operator/agent-operator/internal/pricing"
)

// allMetrics are the metric families the package exposes; docs, rules and
// the dashboard are checked against them.
var allMetrics = []string{
	"agent_operator_exec_stream_reconnects_total",
	"agent_operator_journal_available",
	"agent_operator_journal_publish_duration_seconds",
	"agent_operator_llm_call_duration_seconds",
	"agent_operator_llm_calls_total",
	"agent_operator_llm_client_retries_total",
	"agent_operator_llm_cost_total",
	"agent_operator_llm_errors_total",
	"agent_operator_llm_retries_total",
	"agent_operator_llm_tokens_total",
	"agent_operator_llm_unpriced_calls_total",
	"agent_operator_session_duration_seconds",
	"agent_operator_session_list_errors_total",
	"agent_operator_session_phase_max_age_seconds",
	"agent_operator_session_start_stage_seconds",
	"agent_operator_sessions",
	"agent_operator_sessions_driven",
	"agent_operator_sessions_ended_total",
	"agent_operator_tool_call_duration_seconds",
	"agent_operator_tool_calls_total",
	"agent_operator_turns_total",
	"agent_operator_warm_pool_claims_total",
	"agent_operator_warm_pool_pods",
}

var (
	chartFiles   = filepath.Join("..", "..", "charts", "agent-operator", "files")
	docsFile     = filepath.Join("..", "..", "docs", "observability.md")
	metricInExpr = regexp.MustCompile(`agent_operator_[a-z_]+`)
	// variable is a dashboard variable in a query; Grafana's own start
	// with "__" ($__rate_interval).
	variable = regexp.MustCompile(`\$([a-z_]+)`)
)

// seriesNames are the names a query may use for the exposed families:
// histograms add _bucket, _sum and _count.
func seriesNames(t *testing.T) map[string]bool {
	t.Helper()
	mfs, err := populated(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	var families []string
	for _, mf := range mfs {
		families = append(families, mf.GetName())
		names[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	slices.Sort(families)
	if !slices.Equal(families, allMetrics) {
		t.Fatalf("exposed families\n%v\nwant allMetrics\n%v", families, allMetrics)
	}
	return names
}

func checkExprs(t *testing.T, where string, exprs []string, names map[string]bool) {
	t.Helper()
	if len(exprs) == 0 {
		t.Errorf("%s: no queries found", where)
	}
	for _, e := range exprs {
		used := metricInExpr.FindAllString(e, -1)
		if len(used) == 0 {
			t.Errorf("%s: query %q uses no agent_operator metric", where, e)
		}
		for _, m := range used {
			if !names[m] {
				t.Errorf("%s: query %q uses %s, which the recorder does not expose", where, e, m)
			}
		}
	}
}

func TestAlertRulesUseExposedMetrics(t *testing.T) {
	names := seriesNames(t)
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	var exprs, alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			alerts = append(alerts, r.Alert)
		}
	}
	checkExprs(t, alertsFile, exprs, names)
	for _, want := range []string{"AgentSessionFailureRateHigh", "AgentSessionBudgetExceeded", "AgentSessionStuckProvisioning", "AgentOperatorJournalUnavailable"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s has no alert %s", alertsFile, want)
		}
	}
}

func TestDashboardUsesExposedMetrics(t *testing.T) {
	names := seriesNames(t)
	path := filepath.Join(chartFiles, "dashboard.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		GridPos *struct {
			H, W, X, Y int
		} `json:"gridPos"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dash struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("%s: uid %q, title %q: both are required", path, dash.UID, dash.Title)
	}
	var vars []string
	for _, v := range dash.Templating.List {
		vars = append(vars, v.Name)
	}
	ids := map[int]bool{}
	var exprs []string
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d is used twice", path, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("%s: panel %q has no valid gridPos", path, p.Title)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no queries", path, p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			for _, v := range variable.FindAllStringSubmatch(tg.Expr, -1) {
				if !strings.HasPrefix(v[1], "__") && !slices.Contains(vars, v[1]) {
					t.Errorf("%s: panel %q uses the undefined variable $%s", path, p.Title, v[1])
				}
			}
		}
	}
	checkExprs(t, path, exprs, names)
}

// TestDocsListEveryMetric keeps docs/observability.md complete.
func TestDocsListEveryMetric(t *testing.T) {
	data, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range allMetrics {
		if !strings.Contains(string(data), "`"+m+"`") {
			t.Errorf("%s does not list %s", docsFile, m)
		}
	}
	documented := map[string]bool{}
	for _, m := range metricInExpr.FindAllString(string(data), -1) {
		documented[m] = true
	}
	names := seriesNames(t)
	for m := range documented {
		if !names[m] {
			t.Errorf("%s names %s, which the recorder does not expose", docsFile, m)
		}
	}
}

// TestDocsListBuiltInPrices keeps the price table of docs/observability.md
// equal to the built-in prices.
func TestDocsListBuiltInPrices(t *testing.T) {
	docs, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("..", "pricing", "defaults.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f pricing.File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docs), "**"+f.AsOf+"**") {
		t.Errorf("%s does not give the date of the built-in prices, %s", docsFile, f.AsOf)
	}
	orInput := func(d pricing.Decimal) string {
		if d == "" {
			return "as input"
		}
		return string(d)
	}
	for _, e := range f.Models {
		row := fmt.Sprintf("| `%s` | `%s` | %s | %s | %s | %s |", e.Provider, e.Model, e.Input, e.Output, orInput(e.CacheRead), orInput(e.CacheWrite))
		if !strings.Contains(string(docs), row) {
			t.Errorf("%s lacks the row\n%s", docsFile, row)
		}
	}
}
