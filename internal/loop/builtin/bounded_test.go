package builtin

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/patch"
)

// allocDuring returns the bytes allocated (TotalAlloc) while fn runs.
func allocDuring(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// retainedAfter returns how much the live heap grew across fn, after a GC
// (what fn left reachable, e.g. in collected output).
func retainedAfter(fn func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// nearMiss returns a 78 KiB file of identical short lines and an
// old_string of 58 KiB of those lines plus one line the file lacks: every
// position matches almost to the end, the worst case for naive matching.
func nearMiss() (content, old string) {
	content = strings.Repeat("x = 1\n", 78<<10/6)
	old = strings.Repeat("x  = 1\n", 58<<10/7) + "y = 2\n" // whitespace differs: only the fuzzy levels can match
	return content, old
}

func TestEditFileAdversarialInputsAreBounded(t *testing.T) {
	near, nearOld := nearMiss()
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, 65536 occurrences of a 16-byte string
	tests := []struct {
		name     string
		content  string
		args     map[string]any
		want     string
		maxAlloc uint64
	}{
		{"near-miss multi-line old_string in a 78 KiB file", near,
			map[string]any{"old_string": nearOld, "new_string": "z"}, "was not found", 32 << 20},
		{"replace_all blow-up of a 1 MiB file is refused before the result is built", big,
			map[string]any{"old_string": "0123456789abcdef", "new_string": strings.Repeat("y", 1<<10), "replace_all": true},
			"would make", 32 << 20},
		{"replace_all of a 1-byte string occurring a million times", strings.Repeat("a", 1<<20),
			map[string]any{"old_string": "a", "new_string": "bb", "replace_all": true}, "replaces at most", 32 << 20},
		// Work per line that depends only on old_string (240 KB here) made
		// each of the 10M lines cost milliseconds: hours for one call, and
		// per-line slices of the whole file. It is now done once, so short
		// lines cost O(1) and the call ends long before the deadline.
		{"10 MiB of empty lines and a 240 KB single-line old_string", strings.Repeat("\n", 10<<20-1),
			map[string]any{"old_string": strings.Repeat("a ", 120<<10), "new_string": "z"}, "was not found", 64 << 20},
		{"a fuzzy single-line old_string matching a million lines", strings.Repeat("a  b\n", 1<<20),
			map[string]any{"old_string": "a b", "new_string": "c", "replace_all": true}, "replaces at most", 64 << 20},
		{"a fuzzy fragment matching a million times", strings.Repeat("xa  b", 1<<20),
			map[string]any{"old_string": "a b", "new_string": "c", "replace_all": true}, "replaces at most", 160 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, dir := newEnv(t)
			writeFiles(t, dir, map[string]string{"f.txt": tc.content})
			tc.args["file_path"] = "f.txt"
			// A generous deadline: the call must end with a result well
			// before it (an error from the deadline fails the test).
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var res any
			alloc := allocDuring(func() {
				r, _ := call{env: env, ctx: ctx}.run(t, EditFile(OpenAI), tc.args)
				expect(t, r, true, tc.want)
				res = r
			})
			_ = res
			if alloc > tc.maxAlloc {
				t.Errorf("allocated %d bytes, want at most %d", alloc, tc.maxAlloc)
			}
			if got := readBack(t, dir, "f.txt"); got != tc.content {
				t.Error("the file changed")
			}
		})
	}
}

func TestFindSpansHonoursContext(t *testing.T) {
	content, old := nearMiss()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := findSpans(ctx, content, old)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("findSpans with a cancelled context = %v, want context.Canceled", err)
	}
	// The line and fragment matchers check it while scanning, also
	// through many lines none of which can match.
	for _, content := range []string{strings.Repeat("a  b\n", 20000), strings.Repeat("\n", 20000)} {
		if _, err := findLineSpans(ctx, content, "a b c", patch.FuzzWhitespace); !errors.Is(err, context.Canceled) {
			t.Errorf("line match with a cancelled context = %v, want context.Canceled", err)
		}
		if _, err := findFragmentSpans(ctx, content, "a b c", false); !errors.Is(err, context.Canceled) {
			t.Errorf("fragment match with a cancelled context = %v, want context.Canceled", err)
		}
	}
}

func TestReadManyFilesNestedDoubleStarExcludeIsLinear(t *testing.T) {
	env, dir := newEnv(t)
	deep := strings.Repeat("a/", 30) + "c.txt"
	writeFiles(t, dir, map[string]string{deep: "deep\n", "keep.txt": "keep\n"})
	// 150 bytes of nested ** that never match: exponential for a
	// backtracking matcher, len(pattern)*len(path) for ours.
	exclude := strings.Repeat("**/a/", 14) + "**/b"
	res, _ := call{env: env}.run(t, ReadManyFiles(Gemini), map[string]any{
		"paths": []string{"**/*.txt"}, "exclude": []string{exclude, "keep.txt"},
	})
	expect(t, res, false, "--- "+deep+" ---", "deep")
	if strings.Contains(res.Output, "--- keep.txt ---") {
		t.Error("keep.txt was not excluded")
	}
}

func TestReadFileHugeLimitIsCapped(t *testing.T) {
	env, dir := newEnv(t)
	writeFiles(t, dir, map[string]string{"empty-lines.txt": strings.Repeat("\n", 10<<20-1)})
	var out string
	alloc := allocDuring(func() {
		res, _ := call{env: env}.run(t, ReadFile(Anthropic), map[string]any{"file_path": "empty-lines.txt", "limit": 1 << 30})
		expect(t, res, false, fmt.Sprintf("Use offset=%d", MaxReadLimit+1))
		out = res.Output
	})
	if n := strings.Count(out, "\n"); n > MaxReadLimit+3 {
		t.Errorf("returned %d lines, want at most %d", n, MaxReadLimit)
	}
	// Without the cap, the line numbers alone would be 10M lines * 12 bytes.
	if alloc > 80<<20 {
		t.Errorf("allocated %d bytes reading a 10 MiB file, want at most 80 MiB", alloc)
	}
}

func TestReadFileRangeOfFileAboveReadCap(t *testing.T) {
	dir := t.TempDir()
	env, err := localenv.New(dir, localenv.WithMaxReadBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	var b strings.Builder
	for i := 1; i <= 200000; i++ { // ~2.3 MiB, above the 1 MiB cap
		fmt.Fprintf(&b, "line %d\n", i)
	}
	writeFiles(t, dir, map[string]string{"big.log": b.String()})
	tests := []struct {
		name    string
		args    map[string]any
		isError bool
		want    []string
	}{
		{"range near the end", map[string]any{"offset": 199990, "limit": 5},
			false, []string{"199990 | line 199990", "199994 | line 199994", "of 200000", "Use offset=199995"}},
		{"default limit from the start", map[string]any{},
			false, []string{"1 | line 1", "2000 | line 2000", "of 200000"}},
		{"offset beyond the end", map[string]any{"offset": 300000},
			true, []string{"beyond the end", "200000 lines"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.args["file_path"] = "big.log"
			res, _ := call{env: env, files: newViews()}.run(t, ReadFile(OpenAI), tc.args)
			expect(t, res, tc.isError, tc.want...)
		})
	}
}

func TestShellStreamedOutputIsCapped(t *testing.T) {
	dir := t.TempDir()
	env, err := localenv.New(dir, localenv.WithMaxOutput(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	var streamed string
	grew := retainedAfter(func() {
		res, s := call{env: env}.run(t, Shell(OpenAI), map[string]any{
			"command": "head -c 67108864 /dev/zero | tr '\\0' a", "timeout_ms": 120000})
		expect(t, res, false, "Exit code: 0")
		streamed = s
	})
	if len(streamed) > MaxStreamBytes+200 {
		t.Errorf("streamed %d bytes of 64 MiB, want at most %d plus the marker", len(streamed), MaxStreamBytes)
	}
	if !strings.Contains(streamed, "streamed output capped") {
		t.Error("no cap marker in the streamed output")
	}
	if grew > 16<<20 {
		t.Errorf("the heap grew by %d bytes, want at most 16 MiB", grew)
	}
}
