//go:build unix

package tool_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// refSchema is a tool schema whose property a refers to ref.
func refSchema(ref string) string {
	return `{"type":"object","$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":` + jsonString(ref) + `}}}`
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestRegistrySchemaRefsStayInsideTheSchema(t *testing.T) {
	const marker = "MARKER-7f3c1e"
	secret := filepath.Join(t.TempDir(), "secret.json")
	// A valid schema: a loader that reads it would compile without error.
	if err := os.WriteFile(secret, []byte(`{"type":"string","enum":["`+marker+`"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		ref     string
		refused bool
	}{
		{"internal $defs ref", "#/$defs/n", false},
		{"file URL", "file://" + secret, true},
		{"file URL with fragment", "file://" + secret + "#/enum", true},
		{"http URL", "http://127.0.0.1:1/schema.json", true},
		{"relative ref resolved against the schema's own URL", "other.json", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tool.NewRegistry()
			err := r.Register(tool.Registered{Definition: def("x", refSchema(tc.ref)), Executor: noop("x")})
			if !tc.refused {
				if err != nil {
					t.Fatalf("Register: %v", err)
				}
				if err := r.Validate("x", json.RawMessage(`{"a":"no"}`)); !errors.Is(err, tool.ErrInvalidArguments) {
					t.Errorf("Validate through the internal $ref = %v, want ErrInvalidArguments", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Register accepted a schema with an external $ref")
			}
			if strings.Contains(err.Error(), marker) {
				t.Errorf("the error leaks the referenced file: %v", err)
			}
		})
	}
}

func TestRegistrySchemaFileRefNeverOpensTheFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		r := tool.NewRegistry()
		done <- r.Register(tool.Registered{Definition: def("x", refSchema("file://"+fifo)), Executor: noop("x")})
	}()
	// Opening a FIFO for writing without blocking succeeds only while a
	// reader has it open: poll until Register returns; if it opened the
	// FIFO, the write end is opened (and closed, so the reader sees EOF and
	// Register finishes).
	opened := false
	tryOpen := func() {
		fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			opened = true
			_ = syscall.Close(fd)
		}
	}
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-time.After(5 * time.Millisecond):
			tryOpen()
		}
	}
	if opened {
		t.Error("compiling the schema opened the file its $ref names")
	}
	if err == nil {
		t.Error("Register accepted a schema with a file:// $ref")
	}
}
