package runner

import (
	"path"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// scopeEnv scopes env to the session's working directory (a child
// session's spec.subagents.workingDir inside a shared workspace), if it has
// one. The underlying environment still confines every path to the
// workspace root.
func scopeEnv(env tool.ExecutionEnvironment, s *agentsv1.AgentSession) tool.ExecutionEnvironment {
	sub := s.Spec.Subagents.WorkingDir
	if s.Spec.ParentRef == nil || sub == "" {
		return env
	}
	return tool.Scoped(env, path.Join(env.WorkingDirectory(), sub))
}
