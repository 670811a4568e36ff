package runner

import (
	"context"
	"errors"
	"io"
	"path"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// stdioStarter is an execution environment that can run a process with its
// stdin and stdout relayed to the caller: the workspace pod's executor
// (k8senv.Env) or, on a laptop, the local machine (localenv.Env).
type stdioStarter interface {
	StartStdio(ctx context.Context, argv []string, env map[string]string, workingDir string) (io.ReadWriteCloser, error)
}

// errNoStdio is the start error of stdio MCP servers in an environment that
// cannot run them.
var errNoStdio = errors.New("this session's execution environment cannot run stdio MCP servers")

// stdioStart returns how to start the stdio MCP server ms in env: its
// command in the session's working directory (a child's subdirectory of a
// shared workspace) joined with ms.workingDir, with ms.env added.
func stdioStart(env tool.ExecutionEnvironment, s *agentsv1.AgentSession, ms agentsv1.MCPServer) func(context.Context) (io.ReadWriteCloser, error) {
	vars := make(map[string]string, len(ms.Env))
	for _, v := range ms.Env {
		vars[v.Name] = v.Value
	}
	dir := ms.WorkingDir
	if sub := s.Spec.Subagents.WorkingDir; s.Spec.ParentRef != nil && sub != "" && !path.IsAbs(dir) {
		dir = path.Join(sub, dir)
	}
	argv := append([]string(nil), ms.Command...)
	return func(ctx context.Context) (io.ReadWriteCloser, error) {
		st, ok := env.(stdioStarter)
		if !ok {
			return nil, errNoStdio
		}
		return st.StartStdio(ctx, argv, vars, dir)
	}
}

// StartStdio passes to the guarded environment, if it can run stdio
// processes; a refusal of a superseded driver stops the session as for any
// call.
func (e *ownerCheckedEnv) StartStdio(ctx context.Context, argv []string, env map[string]string, workingDir string) (io.ReadWriteCloser, error) {
	st, ok := e.ExecutionEnvironment.(stdioStarter)
	if !ok {
		return nil, errNoStdio
	}
	rwc, err := st.StartStdio(ctx, argv, env, workingDir)
	return rwc, e.check(err)
}
