package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// ExtraToolSource is a set of extra tools that may change while the
// session runs, such as the tools of one MCP server.
type ExtraToolSource interface {
	// Tools returns the source's tools now; New registers them like the
	// tools of WithExtraTools.
	Tools() []tool.Registered
	// Refresh returns the source's tools and whether they changed since
	// the last call (or since Tools). It is called at the start of every
	// turn, so it should return at once when the source has no news. On
	// an error the session keeps the source's tools as they were.
	Refresh(ctx context.Context) (tools []tool.Registered, changed bool, err error)
}

// WithExtraToolSource offers the tools of src like WithExtraTools and
// replaces them between turns when they change: at the start of every
// turn, before the model request is built (never while tools run), the
// session calls src.Refresh. New tools are registered with the same
// validation as WithExtraTools (a tool the registry refuses, or whose name
// another tool of the session already has, is left out); tools the source
// no longer offers are unregistered, and a call to one gets an error result
// saying so. Each change is reported as a WARNING event naming the source
// by name (e.g. "MCP server docs now offers 5 tools (+mcp__docs__search,
// -mcp__docs__find)"); a failed refresh is a WARNING too. With tool_search
// active, the catalogue of deferred tools is rebuilt from the current tools
// (toolsearch.go), so the system prompt changes once per change.
func WithExtraToolSource(name string, src ExtraToolSource) Option {
	return func(o *options) error {
		if src == nil {
			return fmt.Errorf("extra tool source %q is nil", name)
		}
		o.sources = append(o.sources, namedSource{name: name, src: src})
		return nil
	}
}

type namedSource struct {
	name string
	src  ExtraToolSource
}

// toolSource is a source of WithExtraToolSource and the names of its tools
// registered now, in the source's order. It is used by the loop's goroutine
// only (New and the start of each turn).
type toolSource struct {
	namedSource
	names []string
}

// registerToolSources registers the current tools of each source and
// returns them all.
func (s *Session) registerToolSources(sources []namedSource) ([]tool.Registered, error) {
	var all []tool.Registered
	for _, ns := range sources {
		tools := ns.src.Tools()
		if err := s.registerExtraTools(tools); err != nil {
			return nil, fmt.Errorf("%s: %w", ns.name, err)
		}
		ts := &toolSource{namedSource: ns}
		for _, t := range tools {
			ts.names = append(ts.names, t.Definition.Name)
		}
		s.sources = append(s.sources, ts)
		all = append(all, tools...)
	}
	return all, nil
}

// refreshToolSources asks every source for changes and applies them
// (the start of a turn).
func (s *Session) refreshToolSources(ctx context.Context) error {
	for _, ts := range s.sources {
		tools, changed, err := ts.src.Refresh(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			msg := fmt.Sprintf("%s: its tools could not be listed again; the %d tools it offered stay: %v", ts.name, len(ts.names), err)
			if err := s.emit(ctx, EventWarning, EventData{Message: msg}); err != nil {
				return err
			}
			continue
		}
		if !changed {
			continue
		}
		if err := s.emit(ctx, EventWarning, EventData{Message: s.replaceSourceTools(ts, tools)}); err != nil {
			return err
		}
	}
	return nil
}

// replaceSourceTools makes tools the tools of ts and returns the message
// that says what changed.
func (s *Session) replaceSourceTools(ts *toolSource, tools []tool.Registered) string {
	old := make(map[string]tool.Definition, len(ts.names))
	for _, n := range ts.names {
		if t, ok := s.extra.Get(n); ok {
			old[n] = t.Definition
		}
	}
	var names, added, updated, removed, skipped []string
	seen := map[string]bool{}
	for _, t := range tools {
		n := t.Definition.Name
		before, mine := old[n]
		if _, taken := s.extra.Get(n); (taken && !mine) || seen[n] {
			skipped = append(skipped, n+" (another tool of the session has this name)")
			continue
		}
		if err := s.extra.Register(t); err != nil {
			if inner := errors.Unwrap(err); inner != nil {
				err = inner // "register tool NAME: " says the name twice
			}
			skipped = append(skipped, fmt.Sprintf("%s (%v)", n, err))
			continue
		}
		seen[n] = true
		names = append(names, n)
		switch {
		case !mine:
			added = append(added, n)
		case before.Description != t.Definition.Description || !bytes.Equal(before.Parameters, t.Definition.Parameters):
			updated = append(updated, n)
		}
	}
	s.mu.Lock()
	for _, n := range ts.names {
		if !seen[n] {
			s.extra.Unregister(n)
			removed = append(removed, n)
			s.gone[n] = ts.name
		}
	}
	for _, n := range added {
		delete(s.gone, n)
	}
	s.mu.Unlock()
	ts.names = names
	s.rebuildToolSearch()

	var parts []string
	for _, n := range added {
		parts = append(parts, "+"+n)
	}
	for _, n := range removed {
		parts = append(parts, "-"+n)
	}
	for _, n := range updated {
		parts = append(parts, "~"+n)
	}
	msg := fmt.Sprintf("%s now offers %d tools", ts.name, len(names))
	if len(parts) > 0 {
		msg += " (" + strings.Join(parts, ", ") + ")"
	}
	if len(skipped) > 0 {
		msg += "; left out: " + strings.Join(skipped, "; ")
	}
	return msg
}

// goneMessage is the error result of a call to a tool a source no longer
// offers, or "" when name is not such a tool.
func (s *Session) goneMessage(name string) string {
	s.mu.Lock()
	src, ok := s.gone[name]
	s.mu.Unlock()
	if !ok {
		return ""
	}
	return fmt.Sprintf("Tool error (%s): this tool is no longer available: %s stopped offering it (its tool list changed). "+
		"Only the tools in your current tool list can be called.", name, src)
}
