package pricing

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

//go:embed defaults.yaml
var defaultsYAML []byte

// defaults is the parsed built-in table; defaults.yaml is tested to parse.
var defaults = mustParseDefaults()

func mustParseDefaults() *Table {
	var f File
	if err := yaml.UnmarshalStrict(defaultsYAML, &f); err != nil {
		panic(fmt.Sprintf("pricing: defaults.yaml: %v", err))
	}
	t := &Table{currency: f.Currency, asOf: f.AsOf}
	for i, e := range f.Models {
		pe, err := parseEntry(e)
		if err != nil {
			panic(fmt.Sprintf("pricing: defaults.yaml: models[%d]: %v", i, err))
		}
		t.entries = append(t.entries, pe)
	}
	return t
}

// Default is the built-in table (see defaults.yaml for its date).
func Default() *Table {
	return &Table{currency: defaults.currency, asOf: defaults.asOf, entries: append([]entry(nil), defaults.entries...)}
}
