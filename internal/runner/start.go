package runner

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Stages of a session's start that the runner reports to
// Options.StartStage (k8senv reports pod_check and exec_handshake).
const (
	// StageRunnerClaim is from the runner picking the session up until it
	// holds the session's claim (or knows it needs none).
	StageRunnerClaim = "runner_claim"
	// StageBuild is building the LLM client, tools, journal and loop.
	StageBuild = "build"
	// StageFirstToolCall is the first tool call of the runner, from its
	// TOOL_CALL_START to its TOOL_CALL_END.
	StageFirstToolCall = "first_tool_call"
	// StageRunnerToFirstTool is from the runner picking the session up to
	// the result of its first tool call.
	StageRunnerToFirstTool = "runner_to_first_tool"
)

// stage reports that stage of this runner's start took d.
func (s *session) stage(stage string, d time.Duration) {
	if f := s.r.opts.StartStage; f != nil {
		f(stage, d)
	}
}

// firstTool follows the live events of the runner's first tool call and
// reports its stages once it ended. Only the consume goroutine uses it.
type firstTool struct {
	callID string
	start  time.Time
	done   bool
}

// see reports the first tool call's stages when ev ends it.
func (f *firstTool) see(s *session, ev loop.Event) {
	switch {
	case f.done:
	case ev.Kind == loop.EventToolCallStart && f.callID == "":
		f.callID, f.start = ev.Data.CallID, ev.Time
	case ev.Kind == loop.EventToolCallEnd && f.callID != "" && ev.Data.CallID == f.callID:
		f.done = true
		s.stage(StageFirstToolCall, ev.Time.Sub(f.start))
		s.stage(StageRunnerToFirstTool, ev.Time.Sub(s.pickup))
	}
}

// configRead is the session's client configuration (its API key Secret,
// its script) being read while the runner takes the session's claim.
type configRead struct {
	done chan struct{}
	cc   ClientConfig
	err  error
}

// readConfigAhead starts reading the session's client configuration, so
// that the read overlaps the claim's write instead of following it (a warm
// start's first API read, issue 24). Only as many runners as there are
// restore slots read ahead at once; a burst of starts (a wide fan-out) reads
// the rest in build, as before, so it sends the API server no more
// requests at once than it did. Nothing read is used before the claim is
// held: a runner that does not get the claim drops it. The read ends with
// ctx, which the runner cancels when it ends: a runner that did not get the
// claim must not go on reading (an API server that does not answer is read
// again until it does, see steadyReader).
func (s *session) readConfigAhead(ctx context.Context) {
	select {
	case s.r.early <- struct{}{}:
	default:
		return
	}
	c := &configRead{done: make(chan struct{})}
	s.config = c
	go func() {
		defer close(c.done)
		defer func() { <-s.r.early }() // before done: the slot is free once the read is
		c.cc, c.err = clientConfig(ctx, s.reader(), s.r.scripts, s.obj)
	}()
}

// clientConfig returns what readConfigAhead read, or reads it now.
func (s *session) clientConfig(ctx context.Context) (ClientConfig, error) {
	c := s.config
	if c == nil {
		return clientConfig(ctx, s.reader(), s.r.scripts, s.obj)
	}
	select {
	case <-c.done:
		return c.cc, c.err
	case <-ctx.Done():
		return ClientConfig{}, fmt.Errorf("read the client configuration: %w", ctx.Err())
	}
}

// opener is implemented by environments that can open their connection
// ahead of their first call (k8senv.Env opens the pod's exec stream).
type opener interface {
	Open(ctx context.Context) error
}

// openAhead builds the session's environment as soon as the runner holds
// the claim (the environment presents it) and starts opening its
// connection in the background, so that the exec stream's setup overlaps
// with building the loop; the first call waits for that open instead of
// starting one. build takes the result.
func (s *session) openAhead() {
	env, err := s.r.opts.Envs(s.ctx, s.obj, s.pod, s.driver)
	if err != nil {
		s.aheadErr = fmt.Errorf("open workspace environment: %w", err)
		return
	}
	s.ahead = startOpen(s.ctx, env)
}

// workspaceEnv returns the environment openAhead built (building it now if
// it did not run).
func (s *session) workspaceEnv() (tool.ExecutionEnvironment, error) {
	if s.ahead == nil && s.aheadErr == nil {
		s.openAhead()
	}
	return s.ahead, s.aheadErr
}

// startOpen starts opening env's connection under ctx when env can, and
// returns env wrapped so that calls wait for that open.
func startOpen(ctx context.Context, env tool.ExecutionEnvironment) tool.ExecutionEnvironment {
	o, ok := env.(opener)
	if !ok {
		return env
	}
	e := &openingEnv{ExecutionEnvironment: env, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		err := o.Open(ctx)
		if ctx.Err() != nil {
			return // the session stopped: that says nothing about the workspace
		}
		e.mu.Lock()
		e.err = err
		e.mu.Unlock()
	}()
	return e
}

// openingEnv is an environment whose connection is being opened ahead of
// its first call. Every call waits for that open, also those of the
// optional interfaces the environment may have (tool.ConditionalWriter,
// tool.Fetcher, stdioStarter), which it passes on. When it failed, the first
// call returns its error, unchanged (so errors.Is sees what the open saw,
// e.g. executor.ErrNotOwner), and the error is reported nowhere else; later
// calls go to the environment, which opens again as it would after any
// failure.
type openingEnv struct {
	tool.ExecutionEnvironment
	done chan struct{}

	mu  sync.Mutex
	err error // the early open's error, until a call returned it
}

// wait waits for the early open and returns its error once.
func (e *openingEnv) wait(ctx context.Context) error {
	select {
	case <-e.done:
	case <-ctx.Done():
		return fmt.Errorf("wait for the workspace connection: %w", ctx.Err())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	err := e.err
	e.err = nil
	return err
}

func (e *openingEnv) ReadFile(ctx context.Context, p string, o tool.ReadOptions) (*tool.FileContent, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e.ExecutionEnvironment.ReadFile(ctx, p, o)
}

func (e *openingEnv) WriteFile(ctx context.Context, p string, c []byte) error {
	if err := e.wait(ctx); err != nil {
		return err
	}
	return e.ExecutionEnvironment.WriteFile(ctx, p, c)
}

// WriteFileIf implements tool.ConditionalWriter (a plain write when env has none).
func (e *openingEnv) WriteFileIf(ctx context.Context, p string, c []byte, ifSHA256 string) error {
	if err := e.wait(ctx); err != nil {
		return err
	}
	return tool.WriteFileIf(ctx, e.ExecutionEnvironment, p, c, ifSHA256)
}

func (e *openingEnv) DeleteFile(ctx context.Context, p string) error {
	if err := e.wait(ctx); err != nil {
		return err
	}
	return e.ExecutionEnvironment.DeleteFile(ctx, p)
}

func (e *openingEnv) FileExists(ctx context.Context, p string) (bool, error) {
	if err := e.wait(ctx); err != nil {
		return false, err
	}
	return e.ExecutionEnvironment.FileExists(ctx, p)
}

func (e *openingEnv) ListDirectory(ctx context.Context, p string, depth int) ([]tool.DirEntry, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e.ExecutionEnvironment.ListDirectory(ctx, p, depth)
}

func (e *openingEnv) ExecCommand(ctx context.Context, cmd string, o tool.ExecOptions) (*tool.ExecResult, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e.ExecutionEnvironment.ExecCommand(ctx, cmd, o)
}

func (e *openingEnv) Grep(ctx context.Context, pattern, p string, o tool.GrepOptions) (*tool.GrepResult, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e.ExecutionEnvironment.Grep(ctx, pattern, p, o)
}

func (e *openingEnv) Glob(ctx context.Context, pattern, p string) ([]string, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e.ExecutionEnvironment.Glob(ctx, pattern, p)
}

func (e *openingEnv) Initialize(ctx context.Context) error {
	if err := e.wait(ctx); err != nil {
		return err
	}
	return e.ExecutionEnvironment.Initialize(ctx)
}

func (e *openingEnv) Cleanup(ctx context.Context) error {
	if err := e.wait(ctx); err != nil {
		return err
	}
	return e.ExecutionEnvironment.Cleanup(ctx)
}

// Fetch implements tool.Fetcher (ErrFetchUnsupported when env has none).
func (e *openingEnv) Fetch(ctx context.Context, req tool.FetchRequest) (*tool.FetchResult, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return tool.Fetch(ctx, e.ExecutionEnvironment, req)
}

// StartStdio passes to the environment, if it can run stdio processes.
func (e *openingEnv) StartStdio(ctx context.Context, argv []string, env map[string]string, workingDir string) (io.ReadWriteCloser, error) {
	st, ok := e.ExecutionEnvironment.(stdioStarter)
	if !ok {
		return nil, errNoStdio
	}
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return st.StartStdio(ctx, argv, env, workingDir)
}
