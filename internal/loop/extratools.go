package loop

import (
	"fmt"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// WithExtraTools offers tools beyond the profile's, such as a host's MCP
// tools. They join the session's own tools (sessiontools.go): a tool of the
// same name in the profile's registry wins, and in-process subagents do not
// inherit them. Each is registered like a built-in tool (its parameters
// must be a JSON Schema whose root is an object, or New fails) and runs
// through the same pipeline: validation, policy, events, truncation and
// journal. They are not idempotent unless they say so: a call a restart
// interrupted is reported interrupted, never run again.
func WithExtraTools(tools ...tool.Registered) Option {
	return func(o *options) error {
		o.extraTools = append(o.extraTools, tools...)
		return nil
	}
}

// registerExtraTools registers the tools of WithExtraTools in the session's
// own registry.
func (s *Session) registerExtraTools(tools []tool.Registered) error {
	for _, t := range tools {
		if err := s.extra.Register(t); err != nil {
			return fmt.Errorf("extra tools: %w", err)
		}
	}
	return nil
}
