package truncate_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/truncate"
)

func TestChars(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		mode truncate.Mode
		want string
	}{
		{"under limit", "abcdef", 6, truncate.HeadTail, "abcdef"},
		{"disabled", "abcdef", 0, truncate.Tail, "abcdef"},
		{"head_tail", "abcdefghij", 4, truncate.HeadTail,
			"ab\n\n[WARNING: Tool output was truncated. 6 characters were removed from the middle. The full output is available in the event stream. If you need to see specific parts, re-run the tool with more targeted parameters.]\n\nij"},
		{"tail", "abcdefghij", 4, truncate.Tail,
			"[WARNING: Tool output was truncated. First 6 characters were removed. The full output is available in the event stream.]\n\nghij"},
		{"counts characters not bytes", "ééééé", 5, truncate.Tail, "ééééé"},
		{"keeps utf-8 intact", "日本語テキスト", 2, truncate.HeadTail,
			"日\n\n[WARNING: Tool output was truncated. 5 characters were removed from the middle. The full output is available in the event stream. If you need to see specific parts, re-run the tool with more targeted parameters.]\n\nト"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := truncate.Chars(tt.in, tt.max, tt.mode); got != tt.want {
				t.Errorf("Chars() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLines(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"under limit", "a\nb\nc", 3, "a\nb\nc"},
		{"disabled", "a\nb\nc", 0, "a\nb\nc"},
		{"even split", "1\n2\n3\n4\n5\n6", 4, "1\n2\n[... 2 lines omitted ...]\n5\n6"},
		{"odd max keeps more tail", "1\n2\n3\n4\n5\n6", 3, "1\n[... 3 lines omitted ...]\n5\n6"},
		{"one line", "1\n2\n3", 1, "\n[... 2 lines omitted ...]\n3"},
		{"trailing newline is an empty line", "1\n2\n3\n", 2, "1\n[... 2 lines omitted ...]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := truncate.Lines(tt.in, tt.max); got != tt.want {
				t.Errorf("Lines() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDefaultLimits pins the tables of seed 000 §5.2 and §5.3.
func TestDefaultLimits(t *testing.T) {
	chars := map[string]truncate.Limit{
		"read_file": {50000, truncate.HeadTail}, "shell": {30000, truncate.HeadTail},
		"grep": {20000, truncate.Tail}, "glob": {20000, truncate.Tail},
		"edit_file": {10000, truncate.Tail}, "apply_patch": {10000, truncate.Tail},
		"write_file": {1000, truncate.Tail}, "spawn_agent": {20000, truncate.HeadTail},
	}
	for name, want := range chars {
		if got := truncate.DefaultLimits[name]; got != want {
			t.Errorf("DefaultLimits[%s] = %+v, want %+v", name, got, want)
		}
	}
	lines := map[string]int{"shell": 256, "grep": 200, "glob": 500}
	for name, want := range lines {
		if got := truncate.DefaultLineLimits[name]; got != want {
			t.Errorf("DefaultLineLimits[%s] = %d, want %d", name, got, want)
		}
	}
	for _, name := range []string{"read_file", "edit_file"} {
		if _, ok := truncate.DefaultLineLimits[name]; ok {
			t.Errorf("%s must have no line limit", name)
		}
	}
}

// TestOutputTenMegabyteSingleLine is the pathological case of §5.3: one
// 10 MB line passes line truncation untouched, so characters must go first.
func TestOutputTenMegabyteSingleLine(t *testing.T) {
	in := strings.Repeat("x", 10<<20)
	for _, tool := range []string{"shell", "read_file", "grep", "custom_tool"} {
		got := truncate.Output(in, tool, nil, nil)
		lim, ok := truncate.DefaultLimits[tool]
		if !ok {
			lim = truncate.Fallback
		}
		removed := len(in) - lim.MaxChars
		if !strings.Contains(got, fmt.Sprintf("%d characters were removed", removed)) {
			t.Errorf("%s: missing marker for %d removed characters", tool, removed)
		}
		if xs := strings.Count(got, "x"); xs != lim.MaxChars {
			t.Errorf("%s: kept %d characters, want %d", tool, xs, lim.MaxChars)
		}
	}
}

func TestOutputHundredThousandLines(t *testing.T) {
	var b strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&b, "%d\n", i)
	}
	in := strings.TrimSuffix(b.String(), "\n") // 588,889 chars
	got := truncate.Output(in, "shell", nil, nil)
	// Characters first: 30,000 kept around the marker (which holds one
	// newline pair on each side), then 256 lines.
	lines := strings.Split(got, "\n")
	if len(lines) != 257 {
		t.Fatalf("got %d lines, want 256 plus the omission marker", len(lines))
	}
	if lines[0] != "0" || lines[len(lines)-1] != "99999" {
		t.Errorf("head %q / tail %q not kept", lines[0], lines[len(lines)-1])
	}
	if !strings.Contains(got, "lines omitted ...]") {
		t.Error("line marker missing")
	}
	if strings.Contains(got, "characters were removed") {
		// The character marker sits in the middle and is dropped by the line
		// pass; what matters is the order: chars first, then lines.
		t.Error("character marker should have been cut by line truncation")
	}
	// Line truncation alone (no char limit) keeps 128 head and 128 tail lines.
	got = truncate.Output(in, "shell", map[string]int{"shell": 0}, nil)
	want := "[... 99744 lines omitted ...]"
	if !strings.Contains(got, want) {
		t.Errorf("missing %q", want)
	}
}

func TestOutputOverrides(t *testing.T) {
	in := strings.Repeat("line\n", 50)
	tests := []struct {
		name       string
		tool       string
		chars      map[string]int
		lines      map[string]int
		wantMarker string
	}{
		{"default read_file has no line limit", "read_file", nil, nil, ""},
		{"line limit override", "read_file", nil, map[string]int{"read_file": 10}, "[... 41 lines omitted ...]"},
		{"char limit override", "read_file", map[string]int{"read_file": 100}, nil, "150 characters were removed from the middle"},
		{"line limit disabled", "shell", nil, map[string]int{"shell": 0}, ""},
		{"shell default fits", "shell", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := truncate.Output(in, tt.tool, tt.chars, tt.lines)
			if tt.wantMarker == "" {
				if got != in {
					t.Errorf("output changed: %q", got)
				}
				return
			}
			if !strings.Contains(got, tt.wantMarker) {
				t.Errorf("missing %q in %q", tt.wantMarker, got)
			}
		})
	}
}

func BenchmarkTruncate10MB(b *testing.B) {
	in := strings.Repeat("0123456789abcdef\n", (10<<20)/17)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		_ = truncate.Output(in, "shell", nil, nil)
	}
}
