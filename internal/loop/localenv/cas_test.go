package localenv

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func TestWriteFileIf(t *testing.T) {
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tests := []struct {
		name     string
		existing *string
		ifSHA    string
		conflict bool
	}{
		{"matching hash writes", ptr("old"), sum("old"), false},
		{"changed file is a conflict", ptr("changed"), sum("old"), true},
		{"must-not-exist on a new file writes", nil, "", false},
		{"must-not-exist on an existing file is a conflict", ptr("old"), "", true},
		{"deleted file is a conflict", nil, sum("old"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			env, err := New(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { env.Close() })
			p := filepath.Join(dir, "f.txt")
			if tc.existing != nil {
				if err := os.WriteFile(p, []byte(*tc.existing), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err = env.WriteFileIf(t.Context(), "f.txt", []byte("new"), tc.ifSHA)
			got, _ := os.ReadFile(p)
			if tc.conflict {
				if !errors.Is(err, tool.ErrConflict) {
					t.Fatalf("err = %v, want ErrConflict", err)
				}
				if tc.existing != nil && string(got) != *tc.existing {
					t.Errorf("file = %q, want it unchanged", got)
				}
				return
			}
			if err != nil || string(got) != "new" {
				t.Fatalf("err = %v, file = %q; want the write", err, got)
			}
		})
	}
}

func ptr(s string) *string { return &s }
