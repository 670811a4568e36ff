package loop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
	"github.com/agent-operator/agent-operator/internal/loop/truncate"
)

// InterruptedResult is the error result given to a tool call that was
// started before a restart and did not finish (it is never re-run).
const InterruptedResult = "interrupted: the tool call was started before a restart and did not finish; it was not re-run and may have had side effects"

// executeToolCalls runs the calls of one round, concurrently when the
// profile supports parallel tool calls, and returns exactly one result per
// call in call order.
//
// Calls stopped by a limit (duplicate id, too many calls, arguments too
// large) are pre-resolved as error results without running; the others
// still run (seed 002 FR-LIM-06, FR-VAL-02a).
func (s *Session) executeToolCalls(ctx context.Context, calls []llm.ToolCall) []llm.ToolResult {
	results := make([]llm.ToolResult, len(calls))
	if s.toolGate != nil {
		select {
		case <-s.toolGate:
		case <-ctx.Done(): // stopped before the gate opened: nothing runs
			for i, c := range calls {
				results[i] = s.refuseTool(ctx, c, fmt.Sprintf("Tool error (%s): not run: %v", c.Name, context.Cause(ctx)))
			}
			return results
		}
	}
	refused := s.cfg.Limits.preResolve(calls)
	run := func(i int, c llm.ToolCall) {
		if refused[i] != "" {
			results[i] = s.refuseTool(ctx, c, refused[i])
			return
		}
		results[i] = s.executeTool(ctx, c)
	}
	if !s.profile.Capabilities().ParallelToolCalls || len(calls) < 2 {
		for i, c := range calls {
			run(i, c)
		}
		return results
	}
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { run(i, c) })
	}
	wg.Wait()
	return results
}

// refuseTool journals a call that a limit stopped (start and end, so a
// restored session sees it resolved) and returns its error result.
func (s *Session) refuseTool(ctx context.Context, call llm.ToolCall, msg string) llm.ToolResult {
	start := s.now()
	args := call.Arguments
	if len(args) > DefaultMaxToolArgsBytes {
		args = nil // the refused oversized arguments are not journaled again
	}
	_ = s.emitSync(ctx, EventToolCallStart, EventData{ToolName: call.Name, CallID: call.ID, Arguments: args})
	s.endTool(ctx, call, start, EventData{Error: msg, IsError: true})
	return llm.ToolResult{CallID: call.ID, Name: call.Name, Content: s.truncate(call.Name, msg), IsError: true}
}

// executeTool is the pipeline of seed 000 §3.8: LOOKUP, VALIDATE, POLICY,
// EXECUTE, TRUNCATE, EMIT, RETURN. Every failure becomes an error result.
func (s *Session) executeTool(ctx context.Context, call llm.ToolCall) llm.ToolResult {
	start := s.now()
	fail := func(msg string) llm.ToolResult {
		s.endTool(ctx, call, start, EventData{Error: msg, IsError: true})
		return llm.ToolResult{CallID: call.ID, Name: call.Name, Content: s.truncate(call.Name, msg), IsError: true}
	}
	// The start must be durable before the tool runs: a restored session
	// never re-runs a journaled start, and must not miss an unjournaled run.
	if err := s.emitSync(ctx, EventToolCallStart, EventData{ToolName: call.Name, CallID: call.ID, Arguments: call.Arguments}); err != nil {
		return fail(fmt.Sprintf("Tool error (%s): not run: %v", call.Name, err))
	}
	reg := s.registryFor(call.Name)
	registered, ok := reg.Get(call.Name)
	if !ok {
		if msg := s.goneMessage(call.Name); msg != "" {
			return fail(msg)
		}
		return fail("Unknown tool: " + call.Name)
	}
	if s.deferredOut(call.Name) {
		return fail(notLoadedMessage(call.Name))
	}
	if err := reg.Validate(call.Name, call.Arguments); err != nil {
		return fail(fmt.Sprintf("Tool error (%s): %v", call.Name, err))
	}
	if reason, allowed := s.checkPolicy(ctx, call); !allowed {
		return fail(fmt.Sprintf("Tool error (%s): denied by policy: %s", call.Name, reason))
	}
	views := &callViews{FileViews: s.files}
	res, err := s.runExecutor(ctx, registered.Executor, call, views)
	if err != nil {
		s.endTool(ctx, call, start, EventData{Error: fmt.Sprintf("Tool error (%s): %v", call.Name, err), IsError: true, Files: views.recorded()})
		return llm.ToolResult{CallID: call.ID, Name: call.Name, Content: s.truncate(call.Name, fmt.Sprintf("Tool error (%s): %v", call.Name, err)), IsError: true}
	}
	s.endTool(ctx, call, start, EventData{Output: res.Output, IsError: res.IsError, Files: views.recorded()})
	return llm.ToolResult{CallID: call.ID, Name: call.Name, Content: s.truncate(call.Name, res.Output),
		IsError: res.IsError, Images: res.Images}
}

func (s *Session) endTool(ctx context.Context, call llm.ToolCall, start time.Time, data EventData) {
	data.ToolName, data.CallID = call.Name, call.ID
	data.DurationMs = s.now().Sub(start).Milliseconds()
	_ = s.emitSync(ctx, EventToolCallEnd, data)
}

func (s *Session) truncate(name, output string) string {
	return truncate.Output(output, name, s.cfg.ToolOutputLimits, s.cfg.ToolLineLimits)
}

// checkPolicy asks the tool policy; Ask without an approver is Deny.
func (s *Session) checkPolicy(ctx context.Context, call llm.ToolCall) (string, bool) {
	if s.policy == nil {
		return "", true
	}
	req := PolicyRequest{SessionID: s.id, ToolName: call.Name, CallID: call.ID,
		Arguments: call.Arguments, Command: shellCommand(call.Arguments)}
	v := s.policy.Check(ctx, req)
	switch v.Decision {
	case Allow, "":
		return "", true
	case Ask:
		if s.approve == nil {
			return "approval required and the session is headless (ask = deny): " + v.Reason, false
		}
		ok, err := s.approve(ctx, req, v.Reason)
		if err != nil {
			return "approval failed: " + err.Error(), false
		}
		if !ok {
			return "rejected by the user: " + v.Reason, false
		}
		return "", true
	default:
		return v.Reason, false
	}
}

// runExecutor calls the executor, turning panics into errors.
//
// The executor sees the session's environment behind the credential-path
// denials (pathguard.go) and views, the call's window on the session's read
// tracking; the file tools (read_file, read_many_files, grep, glob,
// list_dir, edit_file, apply_patch) run under the per-tool timeout of the
// limits.
func (s *Session) runExecutor(ctx context.Context, exec tool.Executor, call llm.ToolCall, views *callViews) (res tool.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	if d := s.cfg.Limits.timeout(call.Name); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, fmt.Errorf("%s did not finish within %s; %s", call.Name, d, narrowHint(call.Name)))
		defer cancel()
	}
	inv := &tool.Invocation{
		CallID: call.ID, Name: call.Name, Arguments: call.Arguments,
		Env:            &guardedEnv{ExecutionEnvironment: s.env, rules: newPathRules(s.cfg)},
		DefaultTimeout: s.defaultTimeout(), MaxTimeout: s.cfg.MaxCommandTimeout,
		Output: func(delta string) { s.em.emitDelta(EventToolCallOutputDelta, call.ID, delta) },
		Files:  views,
	}
	if s.spawner != nil {
		inv.Subagents = s.spawner
	}
	res, err = exec(ctx, inv)
	switch {
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		err = fmt.Errorf("aborted: %w", context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		err = fmt.Errorf("timed out: %w", context.Cause(ctx))
	}
	return res, err
}

func (s *Session) defaultTimeout() time.Duration {
	if s.cfg.DefaultCommandTimeout > 0 {
		return s.cfg.DefaultCommandTimeout
	}
	if d := s.profile.Capabilities().DefaultCommandTimeout; d > 0 {
		return d
	}
	return DefaultCommandTimeout
}

// narrowHint says how to make a call of the named file tool cheaper.
func narrowHint(name string) string {
	switch name {
	case "edit_file", "apply_patch":
		return "use a shorter, more specific old text in a smaller file, or split the change"
	}
	return "narrow it (a smaller path, a more specific pattern, a range of lines)"
}
