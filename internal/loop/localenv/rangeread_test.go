package localenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func TestReadFileRangeAboveCap(t *testing.T) {
	dir := t.TempDir()
	env, err := New(dir, WithMaxReadBytes(64<<10), WithMaxScanBytes(4<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	var b strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	b.WriteString("last") // no final newline
	if err := os.WriteFile(filepath.Join(dir, "big"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		opts      tool.ReadOptions
		want      string
		wantErr   error
		wantTotal int
	}{
		{"middle", tool.ReadOptions{Offset: 50000, Limit: 3}, "50000\n50001\n50002\n", nil, 100001},
		{"unterminated last line", tool.ReadOptions{Offset: 100001, Limit: 10}, "last", nil, 100001},
		{"past the end", tool.ReadOptions{Offset: 200000, Limit: 1}, "", nil, 100001},
		{"selection above the scan cap", tool.ReadOptions{Offset: 1, Limit: 5000}, "", ErrScanLimit, 0},
		{"whole file is still refused", tool.ReadOptions{}, "", ErrTooLarge, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fc, err := env.ReadFile(t.Context(), "big", tc.opts)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(fc.Content) != tc.want || fc.TotalLines != tc.wantTotal {
				t.Errorf("content %q total %d, want %q total %d", fc.Content, fc.TotalLines, tc.want, tc.wantTotal)
			}
		})
	}
}

func TestReadFileRangeOfHugeFileIsBoundedAndCancellable(t *testing.T) {
	dir := t.TempDir()
	env, err := New(dir, WithMaxReadBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	f, err := os.Create(filepath.Join(dir, "huge"))
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 99) + "\n"
	chunk := strings.Repeat(line, 10000) // 1 MB
	for range 64 {
		if _, err := f.WriteString(chunk); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fc, err := env.ReadFile(t.Context(), "huge", tool.ReadOptions{Offset: 639990, Limit: 20})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if fc.TotalLines != 640000 || strings.Count(string(fc.Content), "\n") != 11 {
		t.Errorf("total %d, %d lines returned; want 640000 and 11", fc.TotalLines, strings.Count(string(fc.Content), "\n"))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("allocated %d bytes for a range of a 64 MB file, want at most 4 MiB", alloc)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, _, err := readRange(ctx, strings.NewReader(strings.Repeat(chunk, 2)), 1, 1, 1<<20); !errors.Is(err, context.Canceled) {
		t.Errorf("readRange with a cancelled context = %v, want context.Canceled", err)
	}
}
