package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Variant selects a provider's native tool descriptions and extras.
type Variant string

// Variants.
const (
	OpenAI    Variant = "openai"    // codex-rs style
	Anthropic Variant = "anthropic" // Claude Code style
	Gemini    Variant = "gemini"    // gemini-cli style
)

// Size caps (seed 002 DoS limits).
const (
	// MaxWriteBytes caps write_file content and edit_file strings.
	MaxWriteBytes = 10 << 20
	// MaxPatchBytes caps the apply_patch patch text (seed 002 FR-LIM-04,
	// max_apply_patch_bytes).
	MaxPatchBytes = 512 << 10
	// DefaultReadLimit is read_file's default number of lines.
	DefaultReadLimit = 2000
	// MaxReadLimit caps read_file's limit: the line-number prefix would
	// otherwise let a file of empty lines grow many times over.
	MaxReadLimit = 10000
	// DefaultMaxResults is grep's default number of matches.
	DefaultMaxResults = 100
	// MaxListDepth caps list_dir's depth.
	MaxListDepth = 10
	// MaxManyFiles caps the files read_many_files reads in one call.
	MaxManyFiles = 200
	// MaxManyBytes caps the total bytes read_many_files reads in one call.
	MaxManyBytes = 10 << 20
)

// pick returns the description for v, falling back to the OpenAI one.
func pick(v Variant, byVariant map[Variant]string) string {
	if d, ok := byVariant[v]; ok {
		return d
	}
	return byVariant[OpenAI]
}

// prop is one JSON Schema property.
type prop struct {
	Type        string   `json:"type"`
	Description string   `json:"description,omitempty"`
	Items       *prop    `json:"items,omitempty"`
	Enum        []string `json:"enum,omitempty"`
	Minimum     *int     `json:"minimum,omitempty"`
	MinItems    *int     `json:"minItems,omitempty"`
}

func intMin(n int) *int { return &n }

// objectSchema renders an object schema; properties keep the order given.
func objectSchema(required []string, props ...namedProp) json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"type":"object","properties":{`)
	for i, p := range props {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(p.name)
		v, _ := json.Marshal(p.prop)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteString(`}`)
	if len(required) > 0 {
		r, _ := json.Marshal(required)
		b.WriteString(`,"required":`)
		b.Write(r)
	}
	b.WriteString(`}`)
	return json.RawMessage(b.Bytes())
}

type namedProp struct {
	name string
	prop prop
}

func p(name, typ, desc string) namedProp {
	return namedProp{name: name, prop: prop{Type: typ, Description: desc}}
}

// flexInt accepts JSON integers, integral floats (10.0) and numeric strings.
type flexInt struct {
	set bool
	v   int
}

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		return nil
	}
	s = strings.Trim(s, `"`)
	if n, err := strconv.Atoi(s); err == nil {
		f.set, f.v = true, n
		return nil
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || x != float64(int(x)) {
		return fmt.Errorf("expected an integer, got %s", string(b))
	}
	f.set, f.v = true, int(x)
	return nil
}

// flexBool accepts JSON booleans and "true"/"false" strings.
type flexBool bool

func (f *flexBool) UnmarshalJSON(b []byte) error {
	s := strings.Trim(strings.TrimSpace(string(b)), `"`)
	switch strings.ToLower(s) {
	case "true":
		*f = true
	case "false", "null", "":
		*f = false
	default:
		return fmt.Errorf("expected a boolean, got %s", string(b))
	}
	return nil
}

// decode unmarshals the invocation's arguments into dst. A failure is a
// model-readable message.
func decode(inv *tool.Invocation, dst any) (string, bool) {
	args := inv.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if err := json.Unmarshal(args, dst); err != nil {
		return fmt.Sprintf("Invalid arguments for %s: %v. Arguments must be a JSON object matching the tool's schema.", inv.Name, err), false
	}
	return "", true
}

// errorResult is an IsError result.
func errorResult(format string, args ...any) (tool.Result, error) {
	return tool.Result{Output: fmt.Sprintf(format, args...), IsError: true}, nil
}

// envFailure turns an environment error into a result the model can act on;
// if ctx is done, the context error is returned instead.
func envFailure(ctx context.Context, inv *tool.Invocation, action, path string, err error) (tool.Result, error) {
	if cerr := ctx.Err(); cerr != nil {
		return tool.Result{}, cerr
	}
	switch {
	case errors.Is(err, tool.ErrNotFound):
		return errorResult("Error: cannot %s %s: it does not exist. Check the path (glob or list_dir help find files).", action, path)
	case errors.Is(err, tool.ErrPathEscapes):
		return errorResult("Error: cannot %s %s: the path is outside the workspace %s.", action, path, inv.Env.WorkingDirectory())
	}
	return errorResult("Error: cannot %s %s: %v", action, path, err)
}

// matchGlob matches a slash-separated relative name against a glob pattern
// (path.Match per segment, "**" for any number of segments). A pattern
// without a slash also matches the base name.
func matchGlob(pattern, name string) bool {
	pattern = strings.TrimPrefix(pattern, "./")
	name = strings.TrimPrefix(name, "./")
	if !strings.Contains(pattern, "/") {
		if ok, _ := path.Match(pattern, path.Base(name)); ok {
			return true
		}
	}
	return tool.MatchSegments(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

// requirePath returns a model-readable message when path is empty.
func requirePath(name, path string) (string, bool) {
	if strings.TrimSpace(path) == "" {
		return fmt.Sprintf("Error: the %q parameter is required and must not be empty.", name), false
	}
	return "", true
}

// displayDir names a directory argument in messages.
func displayDir(dir string) string {
	if dir == "." || dir == "./" {
		return "the working directory"
	}
	return dir
}
