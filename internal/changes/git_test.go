package changes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
)

// A size the workspace prints is a plain non-negative decimal fitting an
// int64; anything else is an error, never a panic or a guess.
func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want int64
		err  string // in the error; "" for none
	}{
		{out: "123\n", want: 123},
		{out: "      42\n", want: 42}, // BSD and busybox wc pad
		{out: "0\n", want: 0},
		{out: "1000000000000000000\n", want: 1000000000000000000}, // parses; the callers' limits refuse it
		{out: "", err: "not a byte count"},
		{out: "\n", err: "not a byte count"},
		{out: "-1\n", err: "not a byte count"},
		{out: "-9223372036854775808", err: "not a byte count"},
		{out: "+5", err: "not a byte count"},
		{out: "12abc", err: "not a byte count"},
		{out: "1e9", err: "not a byte count"},
		{out: "0x10", err: "not a byte count"},
		{out: "1.5", err: "not a byte count"},
		{out: "1 2", err: "not a byte count"},
		{out: "99999999999999999999", err: "out of range"},
		{out: strings.Repeat("x", 1<<20), err: "not a byte count"},
	} {
		name := tc.out
		if len(name) > 24 {
			name = name[:24]
		}
		t.Run(name, func(t *testing.T) {
			got, err := parseSize(tc.out)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("parseSize(%q) = %d, %v; want %d", name, got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("parseSize(%q) = %d, %.200v; want an error saying %q", name, got, err, tc.err)
			}
			if len(err.Error()) > 200 {
				t.Fatalf("error of %d bytes quotes too much of the answer", len(err.Error()))
			}
		})
	}
}

// readFile takes the reported size as a plan, not a fact: a size outside
// 0..max is refused before any read, and a file with more or fewer bytes
// than reported is an error.
func TestReadFileChecksTheReportedSize(t *testing.T) {
	ws := t.TempDir()
	content := strings.Repeat("0123456789", 10) // 100 bytes
	if err := os.WriteFile(filepath.Join(ws, "f"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := localenv.New(ws)
	if err != nil {
		t.Fatal(err)
	}
	r := &repo{env: env}
	for _, tc := range []struct {
		name      string
		size, max int64
		err       string // in the error; "" to read the content
	}{
		{name: "exact", size: 100, max: 100},
		{name: "negative", size: -1, max: 1000, err: "outside the limit of 0 to 1000 bytes"},
		{name: "huge", size: 1000000000000000000, max: 1000, err: "outside the limit"},
		{name: "over max", size: 100, max: 99, err: "outside the limit of 0 to 99 bytes"},
		{name: "fewer than the file", size: 99, max: 1000, err: "more bytes than the 99"},
		{name: "none of the file", size: 0, max: 1000, err: "more bytes than the 0"},
		{name: "more than the file", size: 101, max: 1000, err: "got 100 bytes of the 101"},
		{name: "more than a chunk", size: chunkBytes + 1, max: 2 * chunkBytes, err: "got 100 bytes of the 8388608"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, release, err := r.readFile(t.Context(), "f", tc.size, tc.max)
			if release != nil {
				defer release()
			}
			if tc.err == "" {
				if err != nil || string(got) != content {
					t.Fatalf("readFile = %d bytes, %v; want the file", len(got), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("readFile = %d bytes, %v; want an error saying %q", len(got), err, tc.err)
			}
		})
	}
}
