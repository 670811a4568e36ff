package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrInvalidArguments is wrapped by Validate errors for arguments that are
// not JSON or do not match the tool's schema.
var ErrInvalidArguments = errors.New("invalid arguments")

// Registry holds the tools of a session (seed 000 §3.8). Registering a name
// again replaces the earlier tool (latest wins). Each schema is compiled once,
// at registration. A Registry is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	tools map[string]*entry
	order []string // registration order of the current names
}

type entry struct {
	tool   Registered
	schema *jsonschema.Schema
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{tools: map[string]*entry{}}
}

// Register adds t or replaces the tool of the same name. It fails when the
// name is empty, the executor is nil, or the parameters are not a JSON Schema
// whose root is an object.
func (r *Registry) Register(t Registered) error {
	name := t.Definition.Name
	if name == "" {
		return errors.New("register tool: empty name")
	}
	if t.Executor == nil {
		return fmt.Errorf("register tool %s: nil executor", name)
	}
	schema, err := compileSchema(name, t.Definition.Parameters)
	if err != nil {
		return fmt.Errorf("register tool %s: %w", name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tools[name]; !ok {
		r.order = append(r.order, name)
	}
	r.tools[name] = &entry{tool: t, schema: schema}
	return nil
}

// Unregister removes the tool called name, if any.
func (r *Registry) Unregister(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tools[name]; !ok {
		return
	}
	delete(r.tools, name)
	r.order = slices.DeleteFunc(r.order, func(n string) bool { return n == name })
}

// Get returns the tool called name.
func (r *Registry) Get(name string) (Registered, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[name]
	if !ok {
		return Registered{}, false
	}
	return e.tool, true
}

// Definitions returns the definitions of all tools in registration order.
func (r *Registry) Definitions() []Definition {
	r.mu.RLock()
	defer r.mu.RUnlock()
	defs := make([]Definition, 0, len(r.order))
	for _, n := range r.order {
		defs = append(defs, r.tools[n].tool.Definition)
	}
	return defs
}

// Names returns the tool names in registration order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.order)
}

// Clone returns an independent registry with the same tools.
func (r *Registry) Clone() *Registry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := &Registry{tools: make(map[string]*entry, len(r.tools)), order: slices.Clone(r.order)}
	for n, e := range r.tools {
		c.tools[n] = e
	}
	return c
}

// Validate parses args and checks them against the schema of the tool called
// name. Empty arguments count as {}. Errors wrap ErrInvalidArguments and say
// what is wrong in words the model can act on.
func (r *Registry) Validate(name string, args json.RawMessage) error {
	r.mu.RLock()
	e, ok := r.tools[name]
	r.mu.RUnlock()
	if !ok {
		return fmt.Errorf("validate %s: unknown tool", name)
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("%w: arguments are not valid JSON: %v", ErrInvalidArguments, err)
	}
	if _, isObj := inst.(map[string]any); !isObj {
		return fmt.Errorf("%w: arguments must be a JSON object", ErrInvalidArguments)
	}
	if err := e.schema.Validate(inst); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidArguments, validationMessage(err))
	}
	return nil
}

func compileSchema(name string, params json.RawMessage) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(params)) == 0 {
		params = json.RawMessage(`{"type":"object"}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return nil, fmt.Errorf("parse parameters schema: %w", err)
	}
	root, ok := doc.(map[string]any)
	if !ok || root["type"] != "object" {
		return nil, errors.New(`parameters schema root must have "type": "object"`)
	}
	c := jsonschema.NewCompiler()
	// A schema comes from a tool's author, possibly a hostile MCP server:
	// refuse every external $ref (file://, http://, ...) so compiling never
	// opens a local file or dials out. References inside the document
	// (#/$defs/...) and the embedded draft metaschemas still resolve.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	url := "tool:///" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("add parameters schema: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("compile parameters schema: %w", err)
	}
	return s, nil
}

// validationMessage flattens a jsonschema error into one line per cause.
func validationMessage(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var msgs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + joinPath(e.InstanceLocation)
			msgs = append(msgs, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return joinLines(msgs)
}
