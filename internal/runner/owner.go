package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/executor"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Driver is the claim under which this instance drives a session, as
// presented to the workspace: the executor refuses the streams of a driver
// older than one it has seen for the session (executor.Owner). The zero
// Driver (a runner without claims) is not checked.
type Driver struct {
	// Holder is this instance (claim.Holder.String()).
	Holder string
	// Epoch is the claim's fence (claim.Claim.Fence).
	Epoch int64
}

// driverOf is the Driver of a claim held by me (none without a claim).
func driverOf(me claim.Holder, cl *claim.Claim) Driver {
	if cl == nil {
		return Driver{}
	}
	return Driver{Holder: me.String(), Epoch: int64(cl.Fence)}
}

// superseded stops the session at once when the workspace refused this
// instance as a superseded driver: like a fenced journal, the session is
// detached (never failed), its journal left as the newer driver has it.
// The controller is told to leave the session alone for a claim's duration
// (Progress.Foreign), so a workspace that keeps refusing (its owner record
// tampered with) is retried at that pace rather than at once.
func (s *session) superseded(err error) {
	s.superOnce.Do(func() {
		var re *executor.RemoteError
		newer := "a newer driver"
		if errors.As(err, &re) && re.Owner != nil {
			newer = fmt.Sprintf("%q (claim epoch %d)", re.Owner.Holder, re.Owner.Epoch)
		}
		s.mu.Lock()
		stopping := s.mode != stopNone
		if !stopping {
			s.prog.Foreign = newer + ", per the workspace's owner record"
			s.prog.ForeignUntil = s.r.opts.Now().Add(claim.DefaultDuration)
		}
		s.mu.Unlock()
		if stopping {
			return // already stopping for another reason, which stands
		}
		s.log.Info("Superseded: the workspace refuses this instance as the session's driver; stopping at once",
			"reason", err.Error())
		s.stop(stopDetach)
	})
}

// ownerCheckedEnv passes every call to env and stops the session (before
// the caller sees the error) when one fails with executor.ErrNotOwner.
type ownerCheckedEnv struct {
	tool.ExecutionEnvironment
	refused func(error)
}

func guardOwner(env tool.ExecutionEnvironment, refused func(error)) tool.ExecutionEnvironment {
	return &ownerCheckedEnv{ExecutionEnvironment: env, refused: refused}
}

func (e *ownerCheckedEnv) check(err error) error {
	if errors.Is(err, executor.ErrNotOwner) {
		e.refused(err)
	}
	return err
}

func (e *ownerCheckedEnv) ReadFile(ctx context.Context, p string, o tool.ReadOptions) (*tool.FileContent, error) {
	fc, err := e.ExecutionEnvironment.ReadFile(ctx, p, o)
	return fc, e.check(err)
}

func (e *ownerCheckedEnv) WriteFile(ctx context.Context, p string, c []byte) error {
	return e.check(e.ExecutionEnvironment.WriteFile(ctx, p, c))
}

// WriteFileIf implements tool.ConditionalWriter (a plain write when env has none).
func (e *ownerCheckedEnv) WriteFileIf(ctx context.Context, p string, c []byte, ifSHA256 string) error {
	return e.check(tool.WriteFileIf(ctx, e.ExecutionEnvironment, p, c, ifSHA256))
}

func (e *ownerCheckedEnv) DeleteFile(ctx context.Context, p string) error {
	return e.check(e.ExecutionEnvironment.DeleteFile(ctx, p))
}

func (e *ownerCheckedEnv) FileExists(ctx context.Context, p string) (bool, error) {
	ok, err := e.ExecutionEnvironment.FileExists(ctx, p)
	return ok, e.check(err)
}

func (e *ownerCheckedEnv) ListDirectory(ctx context.Context, p string, depth int) ([]tool.DirEntry, error) {
	ents, err := e.ExecutionEnvironment.ListDirectory(ctx, p, depth)
	return ents, e.check(err)
}

func (e *ownerCheckedEnv) ExecCommand(ctx context.Context, cmd string, o tool.ExecOptions) (*tool.ExecResult, error) {
	res, err := e.ExecutionEnvironment.ExecCommand(ctx, cmd, o)
	return res, e.check(err)
}

func (e *ownerCheckedEnv) Grep(ctx context.Context, pattern, p string, o tool.GrepOptions) (*tool.GrepResult, error) {
	res, err := e.ExecutionEnvironment.Grep(ctx, pattern, p, o)
	return res, e.check(err)
}

func (e *ownerCheckedEnv) Glob(ctx context.Context, pattern, p string) ([]string, error) {
	paths, err := e.ExecutionEnvironment.Glob(ctx, pattern, p)
	return paths, e.check(err)
}

func (e *ownerCheckedEnv) Initialize(ctx context.Context) error {
	return e.check(e.ExecutionEnvironment.Initialize(ctx))
}

func (e *ownerCheckedEnv) Cleanup(ctx context.Context) error {
	return e.check(e.ExecutionEnvironment.Cleanup(ctx))
}
