package loop

import (
	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// initSessionTools registers the tools the session itself implements:
// todo (todo.go) and skill (skills.go, only when there are skills). They
// live in a registry of their own, not the profile's (which subagents
// share); a tool of the same name in the profile's registry wins.
func (s *Session) initSessionTools() error {
	s.extra = tool.NewRegistry()
	if err := s.extra.Register(s.todoTool()); err != nil {
		return err
	}
	s.skills = append(s.skills, s.cfg.Skills...)
	return s.registerSkillTool()
}

// registryFor is the registry that runs the tool called name.
func (s *Session) registryFor(name string) *tool.Registry {
	if _, ok := s.profile.Registry().Get(name); !ok && s.extra != nil {
		if _, ok := s.extra.Get(name); ok {
			return s.extra
		}
	}
	return s.profile.Registry()
}

// toolDefinitions are the profile's tools followed by the session's own
// (deferred tools only once loaded, after all others in load order:
// toolsearch.go).
func (s *Session) toolDefinitions() []llm.ToolDefinition {
	reg := s.profile.Registry()
	defs := reg.Definitions()
	if s.extra == nil {
		return defs
	}
	for _, d := range s.extra.Definitions() {
		if _, ok := reg.Get(d.Name); ok {
			continue
		}
		if s.deferred != nil {
			if _, deferred := s.deferred.index[d.Name]; deferred {
				continue
			}
		}
		defs = append(defs, d)
	}
	for _, n := range s.loadedTools() {
		if t, ok := s.extra.Get(n); ok {
			defs = append(defs, t.Definition)
		}
	}
	return defs
}
