package loop

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Subagent statuses.
const (
	SubagentRunning   = "running"
	SubagentCompleted = "completed"
	SubagentFailed    = "failed"
	SubagentClosed    = "closed"
)

// localSpawner is the in-process tool.SubagentSpawner: each subagent is a
// child Session sharing the parent's environment, client, policy and
// profile (or the profile for an overridden model), with its own history
// and turn limit, at depth parent+1. Children live until they are closed or
// the parent closes.
type localSpawner struct {
	parent *Session

	mu     sync.Mutex
	n      int
	agents map[string]*subagent
}

type subagent struct {
	id   string
	sess *Session

	mu     sync.Mutex
	status string
	result tool.SubAgentResult
	done   chan struct{} // closed when the current run ends
}

func newLocalSpawner(parent *Session) *localSpawner {
	return &localSpawner{parent: parent, agents: map[string]*subagent{}}
}

var _ tool.SubagentSpawner = (*localSpawner)(nil)

// Spawn implements tool.SubagentSpawner.
func (l *localSpawner) Spawn(ctx context.Context, req tool.SpawnRequest) (tool.SpawnResult, error) {
	p := l.parent
	if req.Task == "" {
		return tool.SpawnResult{}, errors.New("spawn agent: empty task")
	}
	if req.MaxTurns < 0 {
		return tool.SpawnResult{}, fmt.Errorf("spawn agent: negative max_turns %d", req.MaxTurns)
	}
	profile := p.profile
	if req.Model != "" && req.Model != profile.Model() {
		profile = profile.WithModel(req.Model)
	}
	env := p.env
	if req.WorkingDir != "" {
		env = tool.Scoped(p.env, req.WorkingDir)
	}
	cfg := p.cfg
	cfg.MaxTurns = req.MaxTurns
	l.mu.Lock()
	l.n++
	id := fmt.Sprintf("%s-agent-%d", p.id, l.n)
	l.mu.Unlock()
	child, err := New(profile, env, p.client, WithConfig(cfg), WithID(id), WithDepth(p.depth+1),
		WithToolPolicy(p.policy), WithApprover(p.approve), WithClock(p.now), WithFileViews(p.files), WithWebSearch(p.webSearch))
	if err != nil {
		return tool.SpawnResult{}, fmt.Errorf("spawn agent: %w", err)
	}
	go func() {
		for range child.Events() { // children are observed through wait
		}
	}()
	a := &subagent{id: id, sess: child}
	l.mu.Lock()
	l.agents[id] = a
	l.mu.Unlock()
	a.submit(p.life, req.Task)
	return tool.SpawnResult{AgentID: id, Status: SubagentRunning}, nil
}

// submit runs input on the child in the background.
func (a *subagent) submit(ctx context.Context, input string) {
	done := make(chan struct{})
	a.mu.Lock()
	a.status, a.done = SubagentRunning, done
	a.mu.Unlock()
	go func() {
		defer close(done)
		err := a.sess.Submit(ctx, input)
		res := tool.SubAgentResult{TurnsUsed: a.sess.TurnCount(), Success: err == nil}
		a.sess.mu.Lock()
		res.Output = a.sess.lastText
		a.sess.mu.Unlock()
		status := SubagentCompleted
		if err != nil {
			status = SubagentFailed
			if res.Output == "" {
				res.Output = err.Error()
			}
		}
		a.mu.Lock()
		if a.status != SubagentClosed {
			a.status = status
		}
		a.result = res
		a.mu.Unlock()
	}()
}

func (l *localSpawner) get(id string) (*subagent, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.agents[id]
	if !ok {
		return nil, fmt.Errorf("no subagent with id %q", id)
	}
	return a, nil
}

// SendInput implements tool.SubagentSpawner: a running child is steered; a
// finished one processes the message as a new input.
func (l *localSpawner) SendInput(ctx context.Context, agentID, message string) error {
	a, err := l.get(agentID)
	if err != nil {
		return err
	}
	a.mu.Lock()
	status := a.status
	a.mu.Unlock()
	switch status {
	case SubagentRunning:
		a.sess.Steer(message)
	case SubagentClosed:
		return fmt.Errorf("subagent %s is closed", agentID)
	default:
		a.submit(l.parent.life, message)
	}
	return nil
}

// Wait implements tool.SubagentSpawner.
func (l *localSpawner) Wait(ctx context.Context, agentID string) (tool.SubAgentResult, error) {
	a, err := l.get(agentID)
	if err != nil {
		return tool.SubAgentResult{}, err
	}
	a.mu.Lock()
	done := a.done
	a.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return tool.SubAgentResult{}, fmt.Errorf("wait for subagent %s: %w", agentID, ctx.Err())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.result, nil
}

// Close implements tool.SubagentSpawner.
func (l *localSpawner) Close(ctx context.Context, agentID string) (string, error) {
	a, err := l.get(agentID)
	if err != nil {
		return "", err
	}
	return a.close(), nil
}

func (a *subagent) close() string {
	a.mu.Lock()
	final := a.status
	if final == SubagentRunning {
		final = SubagentClosed
	}
	a.status = SubagentClosed
	a.mu.Unlock()
	_ = a.sess.Close()
	return final
}

// closeAll closes every child (parent shutdown).
func (l *localSpawner) closeAll(ctx context.Context) {
	l.mu.Lock()
	agents := make([]*subagent, 0, len(l.agents))
	for _, a := range l.agents {
		agents = append(agents, a)
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(func() { a.close() })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
