package k8senv

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Env is the tool.ExecutionEnvironment of one pod. Obtain it from
// Pool.Env; environments of the same pod share the pool's stream, but each
// checks its own Target.Expect against the pod before it first uses a stream
// (and again after a reconnect), so sharing never skips a caller's check.
// Each call of an environment with an Owner carries that owner, so the
// sidecar checks it against the owner's record and refuses only the calls
// of a superseded owner; the shared stream stays open for the others.
type Env struct {
	pc     *podConn // the pod's shared stream
	target Target

	mu       sync.Mutex
	own      *podConn         // the owner's own stream, with an executor that predates call owners
	verified *executor.Client // the stream this env's expectations were checked for
}

// with runs fn on a client with the context to call it with: the pod's
// shared stream, with the env's owner as the calls' owner; the env's own
// stream with its owner in the hello when the executor predates call
// owners; or in PerCall mode a stream opened for this call alone.
func (e *Env) with(ctx context.Context, fn func(context.Context, *executor.Client) error) error {
	pool := e.pc.pool
	if pool.cfg.Mode == PerCall {
		start := time.Now()
		wctx, stopWait := waitContext(ctx)
		c, err := pool.openRetrying(wctx, e.target)
		stopWait()
		if err != nil {
			return err
		}
		defer c.Close()
		if err := notRun(ctx, e.target.key(), start); err != nil {
			return err
		}
		e.pc.mu.Lock()
		e.pc.hello = c.ServerInfo()
		e.pc.mu.Unlock()
		return fn(ctx, c)
	}
	c, checked, err := e.pc.get(ctx, e.target.Expect)
	if err != nil {
		return err
	}
	if !e.target.Owner.IsZero() {
		if c.ServerInfo().HasFeature(executor.FeatureCallOwner) {
			ctx = executor.ContextWithCallOwner(ctx, e.target.Owner)
		} else if c, checked, err = e.ownConn().get(ctx, e.target.Expect); err != nil {
			return err
		}
	}
	if err := e.verify(ctx, c, checked); err != nil {
		return err
	}
	return fn(ctx, c)
}

// ownConn returns the podConn of the env's owner (for an executor that
// predates call owners).
func (e *Env) ownConn() *podConn {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.own == nil {
		e.own = e.pc.pool.conn(e.target)
	}
	return e.own
}

// verify checks this env's expectations once per stream. The pod was read
// and checked against checked when stream c opened (or its spare was taken
// over), so an env expecting exactly that needs no second read; any other
// env reads the pod once before its first call on the stream.
func (e *Env) verify(ctx context.Context, c *executor.Client, checked Expect) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.verified == c {
		return nil
	}
	if sameExpect(checked, e.target.Expect) {
		e.verified = c
		return nil
	}
	if _, err := e.pc.pool.checkPod(ctx, e.target); err != nil {
		return err
	}
	e.verified = c
	return nil
}

// sameExpect reports whether a and b ask the same of a pod.
func sameExpect(a, b Expect) bool {
	return a.OwnerUID == b.OwnerUID && maps.Equal(a.Labels, b.Labels)
}

// Open checks the pod and opens the shared stream now, unless it is open,
// so that a later call does not wait for it; a call made while Open runs
// waits for that stream rather than opening another. For an env with an
// Owner it also makes one call with that owner, so the sidecar records (or
// refuses, with executor.ErrNotOwner) the owner now, as the hello of a
// stream of its own would: a newer driver's Open refuses an older driver's
// calls from then on. Calls open the stream themselves when needed, so Open
// is optional. In PerCall mode it does nothing.
func (e *Env) Open(ctx context.Context) error {
	if e.pc.pool.cfg.Mode == PerCall {
		return nil
	}
	return e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		if e.target.Owner.IsZero() || !c.ServerInfo().HasFeature(executor.FeatureCallOwner) {
			return nil // a hello carried the owner, or there is none
		}
		_, err := c.FileExists(ctx, ".")
		return err
	})
}

// ReadFile implements tool.ExecutionEnvironment.
func (e *Env) ReadFile(ctx context.Context, path string, opts tool.ReadOptions) (fc *tool.FileContent, err error) {
	err = e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		fc, err = c.ReadFile(ctx, path, opts)
		return err
	})
	return fc, err
}

// WriteFile implements tool.ExecutionEnvironment.
func (e *Env) WriteFile(ctx context.Context, path string, content []byte) error {
	return e.with(ctx, func(ctx context.Context, c *executor.Client) error { return c.WriteFile(ctx, path, content) })
}

// DeleteFile implements tool.ExecutionEnvironment.
func (e *Env) DeleteFile(ctx context.Context, path string) error {
	return e.with(ctx, func(ctx context.Context, c *executor.Client) error { return c.DeleteFile(ctx, path) })
}

// FileExists implements tool.ExecutionEnvironment.
func (e *Env) FileExists(ctx context.Context, path string) (ok bool, err error) {
	err = e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		ok, err = c.FileExists(ctx, path)
		return err
	})
	return ok, err
}

// ListDirectory implements tool.ExecutionEnvironment.
func (e *Env) ListDirectory(ctx context.Context, path string, depth int) (ents []tool.DirEntry, err error) {
	err = e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		ents, err = c.ListDirectory(ctx, path, depth)
		return err
	})
	return ents, err
}

// ExecCommand implements tool.ExecutionEnvironment. Timeouts and
// cancellation terminate the process group inside the pod.
func (e *Env) ExecCommand(ctx context.Context, command string, opts tool.ExecOptions) (res *tool.ExecResult, err error) {
	err = e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		res, err = c.ExecCommand(ctx, command, opts)
		return err
	})
	return res, err
}

// Grep implements tool.ExecutionEnvironment.
func (e *Env) Grep(ctx context.Context, pattern, path string, opts tool.GrepOptions) (res *tool.GrepResult, err error) {
	err = e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		res, err = c.Grep(ctx, pattern, path, opts)
		return err
	})
	return res, err
}

// Glob implements tool.ExecutionEnvironment.
func (e *Env) Glob(ctx context.Context, pattern, path string) (paths []string, err error) {
	err = e.with(ctx, func(ctx context.Context, c *executor.Client) error {
		paths, err = c.Glob(ctx, pattern, path)
		return err
	})
	return paths, err
}

// Initialize checks the pod, opens the stream (persistent mode) and runs the
// sidecar's Initialize.
func (e *Env) Initialize(ctx context.Context) error {
	return e.with(ctx, func(ctx context.Context, c *executor.Client) error { return c.Initialize(ctx) })
}

// Cleanup runs the sidecar's Cleanup. The shared stream stays open for other
// sessions; Pool.Release or Pool.Close end it.
func (e *Env) Cleanup(ctx context.Context) error {
	return e.with(ctx, func(ctx context.Context, c *executor.Client) error { return c.Cleanup(ctx) })
}

// WorkingDirectory returns the configured root.
func (e *Env) WorkingDirectory() string { return e.pc.pool.cfg.Root }

// Platform returns the pod's platform once a stream has been opened, else
// "linux".
func (e *Env) Platform() string {
	e.pc.mu.Lock()
	defer e.pc.mu.Unlock()
	if e.pc.hello.Platform != "" {
		return e.pc.hello.Platform
	}
	return "linux"
}

// OSVersion returns the pod's OS version once a stream has been opened
// (Initialize opens one), else "".
func (e *Env) OSVersion() string {
	e.pc.mu.Lock()
	defer e.pc.mu.Unlock()
	return e.pc.hello.OSVersion
}
