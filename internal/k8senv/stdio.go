package k8senv

import (
	"context"
	"io"

	"github.com/agent-operator/agent-operator/internal/executor"
)

// StartStdio starts argv in the pod (env added to the executor's filtered
// environment, workingDir under the root) and returns its stdin and stdout
// relayed over the pod's stream (executor.Client.StartStdio). The process
// lives until the returned stream is closed or the pod's stream ends (it
// is not restarted by a reconnect). In PerCall mode the process gets a
// stream of its own, closed with it. An executor image that predates stdio
// processes gives an error wrapping executor.ErrStdioUnsupported.
func (e *Env) StartStdio(ctx context.Context, argv []string, env map[string]string, workingDir string) (io.ReadWriteCloser, error) {
	pool := e.pc.pool
	if pool.cfg.Mode == PerCall {
		c, err := pool.openRetrying(ctx, e.target)
		if err != nil {
			return nil, err
		}
		s, err := c.StartStdio(ctx, argv, env, workingDir)
		if err != nil {
			c.Close()
			return nil, err
		}
		return &ownStream{StdioStream: s, c: c}, nil
	}
	var s *executor.StdioStream
	err := e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		var err error
		s, err = c.StartStdio(ctx, argv, env, workingDir)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ownStream is a stdio stream with a client of its own.
type ownStream struct {
	*executor.StdioStream
	c *executor.Client
}

func (s *ownStream) Close() error {
	err := s.StdioStream.Close()
	s.c.Close()
	return err
}
