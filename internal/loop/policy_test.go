package loop_test

import (
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// TestWildcardPatternQuotesEverythingElse: only "*" and "?" are special; every
// other character, regexp syntax included, matches itself, and every pattern
// compiles.
func TestWildcardPatternQuotesEverythingElse(t *testing.T) {
	for _, pat := range []string{`(`, `[a-`, `\`, `a{2,1}`, `+*?`, strings.Repeat("*", 100)} {
		re := loop.WildcardPattern(pat)
		if pat == `(` && re.MatchString("x") {
			t.Errorf("%q matched x", pat)
		}
	}
	if !loop.WildcardPattern(`a.b`).MatchString("a.b") || loop.WildcardPattern(`a.b`).MatchString("axb") {
		t.Error(`"." must be literal`)
	}
}
