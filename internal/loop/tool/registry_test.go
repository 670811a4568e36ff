package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

func noop(name string) tool.Executor {
	return func(context.Context, *tool.Invocation) (tool.Result, error) {
		return tool.Result{Output: name}, nil
	}
}

func def(name, schema string) tool.Definition {
	return tool.Definition{Name: name, Description: name, Parameters: json.RawMessage(schema)}
}

const pathSchema = `{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"integer","minimum":1}},"required":["path"],"additionalProperties":false}`

func TestRegistryLatestWins(t *testing.T) {
	r := tool.NewRegistry()
	for _, reg := range []tool.Registered{
		{Definition: def("a", pathSchema), Executor: noop("a1")},
		{Definition: def("b", `{"type":"object"}`), Executor: noop("b")},
		{Definition: def("a", `{"type":"object"}`), Executor: noop("a2")},
	} {
		if err := r.Register(reg); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Names() = %v", got)
	}
	a, ok := r.Get("a")
	if !ok {
		t.Fatal("a missing")
	}
	res, _ := a.Executor(t.Context(), &tool.Invocation{})
	if res.Output != "a2" {
		t.Errorf("latest registration must win, got %q", res.Output)
	}
	// The replacing schema applies: no required path any more.
	if err := r.Validate("a", json.RawMessage(`{}`)); err != nil {
		t.Errorf("Validate with replaced schema: %v", err)
	}
	r.Unregister("a")
	if _, ok := r.Get("a"); ok {
		t.Error("a still registered")
	}
	if got := len(r.Definitions()); got != 1 {
		t.Errorf("Definitions() has %d entries, want 1", got)
	}
}

func TestRegistryRejectsBadTools(t *testing.T) {
	r := tool.NewRegistry()
	tests := []struct {
		name string
		reg  tool.Registered
	}{
		{"empty name", tool.Registered{Definition: def("", `{"type":"object"}`), Executor: noop("")}},
		{"nil executor", tool.Registered{Definition: def("x", `{"type":"object"}`)}},
		{"root not object", tool.Registered{Definition: def("x", `{"type":"string"}`), Executor: noop("x")}},
		{"schema not JSON", tool.Registered{Definition: def("x", `{`), Executor: noop("x")}},
		{"invalid schema", tool.Registered{Definition: def("x", `{"type":"object","properties":{"a":{"type":"nope"}}}`), Executor: noop("x")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := r.Register(tt.reg); err == nil {
				t.Error("Register accepted a bad tool")
			}
		})
	}
}

func TestRegistryValidate(t *testing.T) {
	r := tool.NewRegistry()
	if err := r.Register(tool.Registered{Definition: def("read", pathSchema), Executor: noop("read")}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    string
		wantErr string
	}{
		{"valid", `{"path":"a.go","n":2}`, ""},
		{"not JSON", `{"path":`, "not valid JSON"},
		{"not an object", `["a"]`, "must be a JSON object"},
		{"missing required", `{}`, "path"},
		{"wrong type", `{"path":3}`, "/path"},
		{"below minimum", `{"path":"a","n":0}`, "/n"},
		{"unknown property", `{"path":"a","x":1}`, "x"},
		{"empty means {} and misses path", ``, "path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Validate("read", json.RawMessage(tt.args))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, tool.ErrInvalidArguments) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want ErrInvalidArguments mentioning %q", err, tt.wantErr)
			}
		})
	}
}
