package pricing

import (
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/llm"
)

func TestAmountRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Amount
		str  string
	}{
		{"0", 0, "0.000000"},
		{"5", 5 * nano, "5.000000"},
		{"0.25", nano / 4, "0.250000"},
		{"12.000001", 12*nano + 1000, "12.000001"},
		{"0.0000005", 500, "0.000001"}, // half a millionth rounds up
		{"0.0000004", 400, "0.000000"},
	} {
		got, err := ParseAmount(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseAmount(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if s := got.String(); s != tc.str {
			t.Errorf("Amount(%d).String() = %q, want %q", got, s, tc.str)
		}
	}
	for _, bad := range []string{"", "-1", "1e3", "abc", "1/3", "0.0000000001", "99999999999999"} {
		if _, err := ParseAmount(bad); err == nil {
			t.Errorf("ParseAmount(%q) succeeded", bad)
		}
	}
}

func TestCostPricesCachedInputAtCacheRates(t *testing.T) {
	tab := Default()
	for _, tc := range []struct {
		name, provider, model string
		u                     llm.Usage
		want                  string
		known                 bool
	}{
		// 1M plain input at $3 plus 100k output at $15.
		{"sonnet plain", "anthropic", "claude-sonnet-4-5", llm.Usage{InputTokens: 1_000_000, OutputTokens: 100_000}, "4.500000", true},
		// Input 1M of which 800k cache reads ($0.30) and 100k cache writes ($3.75): 100k plain.
		{"sonnet cached", "anthropic", "claude-sonnet-4-5-20250929", llm.Usage{InputTokens: 1_000_000, CacheReadTokens: 800_000, CacheWriteTokens: 100_000}, "0.915000", true},
		{"gpt-5 exact", "openai", "gpt-5", llm.Usage{InputTokens: 2_000_000, CacheReadTokens: 1_000_000, OutputTokens: 10_000}, "1.475000", true},
		{"gpt-5-mini is not gpt-5", "openai", "gpt-5-mini", llm.Usage{InputTokens: 1_000_000}, "0.250000", true},
		{"unknown model", "openai", "some-finetune", llm.Usage{InputTokens: 1_000_000}, "0.000000", false},
		{"provider matters", "gemini", "claude-sonnet-4-5", llm.Usage{InputTokens: 1}, "0.000000", false},
		{"scripted is free", "scripted", "anything", llm.Usage{InputTokens: 1_000_000}, "0.000000", true},
	} {
		got, ok := tab.Cost(tc.provider, tc.model, tc.u)
		if got.String() != tc.want || ok != tc.known {
			t.Errorf("%s: Cost = %s, %v; want %s, %v", tc.name, got, ok, tc.want, tc.known)
		}
	}
}

func TestParseOverridesComeFirstAndKeepDefaults(t *testing.T) {
	tab, err := Parse([]byte(`
asOf: "2026-12-01"
models:
- {provider: anthropic, model: claude-sonnet-4-5, input: "0", output: "0"}
- {provider: openai-compatible, model: "*", input: 0.1, output: 0.2}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := tab.Cost("anthropic", "claude-sonnet-4-5", llm.Usage{InputTokens: 1_000_000}); c != 0 {
		t.Errorf("override not applied: %s", c)
	}
	if c, _ := tab.Cost("anthropic", "claude-haiku-4-5", llm.Usage{InputTokens: 1_000_000}); c.String() != "1.000000" {
		t.Errorf("defaults lost: %s", c)
	}
	if c, _ := tab.Cost("openai-compatible", "llama", llm.Usage{OutputTokens: 1_000_000}); c.String() != "0.200000" {
		t.Errorf("wildcard: %s", c)
	}
	if tab.AsOf() != "2026-12-01" || tab.Currency() != "USD" {
		t.Errorf("asOf %q currency %q", tab.AsOf(), tab.Currency())
	}
}

func TestParseRejectsWhatItCannotPrice(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`models: [{provider: openai, model: x, input: "-1", output: "1"}]`, "negative"},
		{`models: [{provider: openai, input: "1", output: "1"}]`, "required"},
		{`models: [{provider: openai, model: "[", input: "1", output: "1"}]`, "syntax"},
		{`currency: EUR
models: []`, "replace: true"},
		{`modles: []`, "unknown field"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.doc, err, tc.want)
		}
	}
	tab, err := Parse([]byte("currency: EUR\nreplace: true\nmodels: [{provider: openai, model: gpt-5, input: '1', output: '2'}]"))
	if err != nil || tab.Currency() != "EUR" || tab.Known("anthropic", "claude-sonnet-4-5") {
		t.Errorf("replace: %v %+v", err, tab)
	}
}
