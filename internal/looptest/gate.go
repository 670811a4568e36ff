package looptest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Gate is a test's "has it begun" signal between two things a session does
// that should overlap: one Opens it when it begins, the other Waits for it
// before it goes on. A Wait that patience ran out on goes on anyway (the two
// ran one after the other) and is noted: Missed reports it. Patience bounds
// how long a failing test takes; it is not a timing goal.
type Gate struct {
	open     chan struct{}
	once     sync.Once
	patience time.Duration
	missed   atomic.Bool
}

// NewGate returns a closed Gate whose Waits give up after patience.
func NewGate(patience time.Duration) *Gate {
	return &Gate{open: make(chan struct{}), patience: patience}
}

// Open opens g; it may be called any number of times.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

// Wait returns once g is open, or when patience ran out (noted).
func (g *Gate) Wait() {
	select {
	case <-g.open:
	case <-time.After(g.patience):
		g.missed.Store(true)
	}
}

// Missed reports whether a Wait gave up before g opened.
func (g *Gate) Missed() bool { return g.missed.Load() }

// CommandsAfter is env whose commands wait for Gate, which its file reads
// open when Reads is set and its directory listings when Lists is: a session
// that runs its command while it reads (or lists) runs it at once, one that
// reads only after the command has to wait out Gate's patience.
type CommandsAfter struct {
	tool.ExecutionEnvironment
	Gate         *Gate
	Reads, Lists bool
}

func (e *CommandsAfter) ReadFile(ctx context.Context, p string, o tool.ReadOptions) (*tool.FileContent, error) {
	if e.Reads {
		e.Gate.Open()
	}
	return e.ExecutionEnvironment.ReadFile(ctx, p, o)
}

func (e *CommandsAfter) ListDirectory(ctx context.Context, p string, depth int) ([]tool.DirEntry, error) {
	if e.Lists {
		e.Gate.Open()
	}
	return e.ExecutionEnvironment.ListDirectory(ctx, p, depth)
}

func (e *CommandsAfter) ExecCommand(ctx context.Context, cmd string, o tool.ExecOptions) (*tool.ExecResult, error) {
	e.Gate.Wait()
	return e.ExecutionEnvironment.ExecCommand(ctx, cmd, o)
}
