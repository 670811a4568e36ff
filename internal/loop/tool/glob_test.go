package tool

import (
	"path"
	"strings"
	"testing"
)

func TestMatchSegments(t *testing.T) {
	tests := []struct {
		pat, name string
		want      bool
	}{
		{"*.go", "main.go", true},
		{"*.go", "a/main.go", false},
		{"**/*.go", "main.go", true},
		{"**/*.go", "a/b/main.go", true},
		{"a/**", "a", true},
		{"a/**", "a/b/c", true},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/x/y/c", false},
		{"**/**/x", "x", true},
		{"**", "", true},
		{"a/*/c", "a/b/c", true},
		{"a/*/c", "a/b/d/c", false},
		{"**/a/**/b/**", "x/a/y/b", true},
		{"**/a/**/b/**", "x/b/y/a", false},
		{"[a-c]/**", "b/z", true},
	}
	for _, tc := range tests {
		var name []string
		if tc.name != "" {
			name = strings.Split(tc.name, "/")
		}
		if got := MatchSegments(strings.Split(tc.pat, "/"), name); got != tc.want {
			t.Errorf("MatchSegments(%q, %q) = %v, want %v", tc.pat, tc.name, got, tc.want)
		}
	}
}

// nestedStars is 150 bytes of nested "**" that almost match a deep path:
// exponential for a backtracking matcher.
func nestedStars() ([]string, []string) {
	pat := strings.Split(strings.Repeat("**/a/", 14)+"**/b", "/")
	name := strings.Split(strings.Repeat("a/", 40)+"c", "/")
	return pat, name
}

func TestMatchSegmentsNestedDoubleStarsTerminate(t *testing.T) {
	pat, name := nestedStars()
	if MatchSegments(pat, name) {
		t.Fatal("matched a path without the final b")
	}
	name[len(name)-1] = "b"
	if !MatchSegments(pat, name) {
		t.Fatal("did not match a path ending in b after 14 a's")
	}
}

func BenchmarkMatchSegmentsNestedDoubleStars(b *testing.B) {
	pat, name := nestedStars()
	for b.Loop() {
		MatchSegments(pat, name)
	}
}

// backtrack is the plain recursive definition of MatchSegments, exponential
// on nested "**" but obviously right: the automaton must agree with it.
func backtrack(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(name); i++ {
			if backtrack(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	if len(name) == 0 {
		return false
	}
	if ok, _ := path.Match(pat[0], name[0]); !ok {
		return false
	}
	return backtrack(pat[1:], name[1:])
}

// FuzzMatchSegments checks the linear matcher against the definition on
// small inputs.
func FuzzMatchSegments(f *testing.F) {
	f.Add("**/a/*.go", "x/a/b.go")
	f.Add("a/**/**/b", "a/b")
	f.Add("**", "")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		pat, nm := strings.Split(pattern, "/"), strings.Split(name, "/")
		if len(pat) > 8 || len(nm) > 8 {
			return
		}
		if name == "" {
			nm = nil
		}
		if got, want := MatchSegments(pat, nm), backtrack(pat, nm); got != want {
			t.Fatalf("MatchSegments(%q, %q) = %v, the definition says %v", pattern, name, got, want)
		}
	})
}
