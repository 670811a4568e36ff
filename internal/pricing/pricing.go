// Package pricing turns token usage into money: a price table per provider
// and model (input, output, cache read and cache write per million tokens),
// with built-in defaults for the models the project's profiles name and
// user overrides read from a file (the chart's ConfigMap).
//
// Amounts are exact integers in nano-units of the table's currency, so sums
// over a session tree never drift the way floats do.
package pricing

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"path"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// Amount is money in nano-units (1e-9) of a table's currency.
type Amount int64

// nano is the number of Amount units in one currency unit.
const nano = 1_000_000_000

// String is the amount as a decimal with six places, e.g. "0.012345".
// Amounts below a millionth round half up.
func (a Amount) String() string {
	neg := a < 0
	if neg {
		a = -a
	}
	micro := (int64(a) + 500) / 1000
	s := fmt.Sprintf("%d.%06d", micro/1_000_000, micro%1_000_000)
	if neg {
		return "-" + s
	}
	return s
}

// ParseAmount reads a non-negative decimal such as "5", "0.25" or
// "12.000001" (at most nine decimal places).
func ParseAmount(s string) (Amount, error) {
	r, ok := new(big.Rat).SetString(strings.TrimSpace(s))
	if !ok || strings.ContainsAny(s, "eE/") {
		return 0, fmt.Errorf("%q is not a decimal number", s)
	}
	if r.Sign() < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(nano))
	if !r.IsInt() {
		return 0, fmt.Errorf("%q has more than nine decimal places", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return Amount(r.Num().Int64()), nil
}

// Decimal is a decimal number written as a string ("0.30") or a number
// (0.3, as Helm's --set writes it).
type Decimal string

// UnmarshalJSON accepts a JSON string or number.
func (d *Decimal) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*d = Decimal(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a decimal such as \"0.30\": %w", err)
	}
	*d = Decimal(n.String())
	return nil
}

// Price is what one model costs per million tokens in the table's
// currency. An empty CacheRead or CacheWrite costs what Input costs.
type Price struct {
	Input      Decimal `json:"input"`
	Output     Decimal `json:"output"`
	CacheRead  Decimal `json:"cacheRead,omitempty"`
	CacheWrite Decimal `json:"cacheWrite,omitempty"`
}

// Entry prices the models of a provider whose name matches Model, a
// path.Match pattern ("claude-sonnet-4*" or an exact name).
type Entry struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Price    `json:",inline"`
}

// File is the format of a price file (the chart's pricing ConfigMap).
type File struct {
	// Currency of every price, e.g. USD. It must equal the defaults'
	// currency unless Replace is set.
	Currency string `json:"currency,omitempty"`
	// AsOf says when the prices were taken from the providers' price lists.
	AsOf string `json:"asOf,omitempty"`
	// Replace drops the built-in defaults instead of overriding them.
	Replace bool `json:"replace,omitempty"`
	// Models are matched in order; the first match wins, and file entries
	// come before the defaults.
	Models []Entry `json:"models"`
}

// rates is a Price parsed: nano-units per million tokens.
type rates struct{ input, output, cacheRead, cacheWrite Amount }

type entry struct {
	provider, model string
	rates           rates
}

// Table prices usage. The zero value prices nothing.
type Table struct {
	currency string
	asOf     string
	entries  []entry
}

// Currency is the currency of every amount the table returns.
func (t *Table) Currency() string { return t.currency }

// AsOf is when the table's prices were taken.
func (t *Table) AsOf() string { return t.asOf }

// Parse reads a price file and returns the table it makes together with
// the defaults (file entries first).
func Parse(data []byte) (*Table, error) {
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("price file: %w", err)
	}
	base := Default()
	t := &Table{currency: base.currency, asOf: base.asOf}
	if f.Replace {
		t = &Table{currency: "USD"}
	}
	if f.Currency != "" && f.Currency != t.currency {
		if !f.Replace {
			return nil, fmt.Errorf("price file: currency %s differs from the defaults' %s: set replace: true to drop the defaults", f.Currency, t.currency)
		}
		t.currency = f.Currency
	}
	if f.AsOf != "" {
		t.asOf = f.AsOf
	}
	for i, e := range f.Models {
		pe, err := parseEntry(e)
		if err != nil {
			return nil, fmt.Errorf("price file: models[%d]: %w", i, err)
		}
		t.entries = append(t.entries, pe)
	}
	if !f.Replace {
		t.entries = append(t.entries, base.entries...)
	}
	return t, nil
}

func parseEntry(e Entry) (entry, error) {
	if e.Provider == "" || e.Model == "" {
		return entry{}, errors.New("provider and model are required")
	}
	if _, err := path.Match(e.Model, ""); err != nil {
		return entry{}, fmt.Errorf("model %q: %w", e.Model, err)
	}
	var r rates
	var err error
	if r.input, err = ParseAmount(string(e.Input)); err != nil {
		return entry{}, fmt.Errorf("input: %w", err)
	}
	if r.output, err = ParseAmount(string(e.Output)); err != nil {
		return entry{}, fmt.Errorf("output: %w", err)
	}
	r.cacheRead, r.cacheWrite = r.input, r.input
	if e.CacheRead != "" {
		if r.cacheRead, err = ParseAmount(string(e.CacheRead)); err != nil {
			return entry{}, fmt.Errorf("cacheRead: %w", err)
		}
	}
	if e.CacheWrite != "" {
		if r.cacheWrite, err = ParseAmount(string(e.CacheWrite)); err != nil {
			return entry{}, fmt.Errorf("cacheWrite: %w", err)
		}
	}
	return entry{provider: e.Provider, model: e.Model, rates: r}, nil
}

// Known reports whether the table has a price for provider and model.
func (t *Table) Known(provider, model string) bool {
	_, ok := t.lookup(provider, model)
	return ok
}

func (t *Table) lookup(provider, model string) (rates, bool) {
	if t == nil {
		return rates{}, false
	}
	for _, e := range t.entries {
		if e.provider != provider {
			continue
		}
		if ok, _ := path.Match(e.model, model); ok {
			return e.rates, true
		}
	}
	return rates{}, false
}

// Cost is what u costs with provider's model; ok is false (and the cost 0)
// when the table has no price for it. u.InputTokens includes the cached
// input, which is priced at the cache rates instead.
func (t *Table) Cost(provider, model string, u llm.Usage) (Amount, bool) {
	r, ok := t.lookup(provider, model)
	if !ok {
		return 0, false
	}
	plain := max(u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens, 0)
	var sum big.Int
	for _, p := range []struct {
		tokens int64
		rate   Amount
	}{{plain, r.input}, {u.OutputTokens, r.output}, {u.CacheReadTokens, r.cacheRead}, {u.CacheWriteTokens, r.cacheWrite}} {
		var term big.Int
		term.Mul(big.NewInt(p.tokens), big.NewInt(int64(p.rate)))
		sum.Add(&sum, &term)
	}
	sum.Quo(&sum, big.NewInt(1_000_000)) // rates are per million tokens
	if !sum.IsInt64() {
		return Amount(1<<63 - 1), true
	}
	return Amount(sum.Int64()), true
}
