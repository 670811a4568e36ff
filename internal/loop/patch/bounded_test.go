package patch

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// nearMissPatch is a 78 KiB file of identical lines and an update hunk of
// 58 KiB of those lines ending in one line the file lacks: every position
// matches almost to the end, the worst case of naive context matching.
func nearMissPatch() (file, text string) {
	file = strings.Repeat("a\n", 39<<10)
	var b strings.Builder
	b.WriteString("*** Begin Patch\n*** Update File: f\n@@\n")
	for range 29 << 10 {
		b.WriteString(" a\n")
	}
	b.WriteString("-missing\n+x\n*** End Patch")
	return file, b.String()
}

func TestApplyNearMissHunkIsBounded(t *testing.T) {
	file, text := nearMissPatch()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ApplyText(t.Context(), newMemStore(map[string]string{"f": file}), text)
	runtime.ReadMemStats(&after)
	var ae *ApplyError
	if !errors.As(err, &ae) || !strings.Contains(ae.Msg, "could not find the expected lines") {
		t.Fatalf("err = %v, want an ApplyError saying the lines were not found", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("allocated %d bytes, want at most 64 MiB", alloc)
	}
}

func TestApplyHonoursContextWhileMatching(t *testing.T) {
	file, text := nearMissPatch()
	p, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	// Load and parse with a live context, then match with a dead one: the
	// matcher itself must notice.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err = applyHunks(ctx, p.Ops[0], file)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("applyHunks with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestFindLines(t *testing.T) {
	lines := strings.Split("a b a b a b c a b", " ")
	tests := []struct {
		name    string
		pat     string
		from    int
		limit   int
		overlap bool
		want    []int
	}{
		{"overlapping", "a b a", 0, 0, true, []int{0, 2}},
		{"non-overlapping", "a b a", 0, 0, false, []int{0}},
		{"limit", "a b", 0, 2, true, []int{0, 2}},
		{"from", "a b", 3, 0, true, []int{4, 7}},
		{"periodic prefix then mismatch", "a b a b c", 0, 0, true, []int{2}},
		{"absent", "c c", 0, 0, true, nil},
		{"longer than file", "a b a b a b c a b a", 0, 0, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FindLines(t.Context(), lines, strings.Split(tc.pat, " "), tc.from, tc.limit, tc.overlap)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("FindLines = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("FindLines = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// BenchmarkApplyNearMiss is the worst case of issue 19 (11 s before the
// linear matcher).
func BenchmarkApplyNearMiss(b *testing.B) {
	file, text := nearMissPatch()
	p, err := Parse(text)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _, _ = applyHunks(b.Context(), p.Ops[0], file)
	}
}
