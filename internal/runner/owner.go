package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

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
//
// A refusal naming a later epoch than this instance's claim, or the same
// epoch under another holder, while this instance holds the claim, means
// the claim's Lease counts lower than before: it was made anew (deleted by
// hand, it counts from 0 again), perhaps by another pod of the install
// after a restart. Waiting would not help (the count never catches up by
// itself), so the runner stops without Foreign and the next runner, started
// at once, takes the claim past that epoch (fenceFloors). Its acquisition
// still reads the Lease: a newer driver that really holds it (this instance
// was paused past its claim) is found there and waited for. Once per claim's
// duration: a workload that keeps writing later epochs into its owner
// records is retried at the Foreign pace.
func (s *session) superseded(err error) {
	s.superOnce.Do(func() {
		var re *executor.RemoteError
		var owner *executor.Owner
		newer := "a newer driver"
		if errors.As(err, &re) && re.Owner != nil {
			owner = re.Owner
			newer = fmt.Sprintf("%q (claim epoch %d)", owner.Holder, owner.Epoch)
		}
		madeAnew := s.leaseMadeAnew(owner)
		s.mu.Lock()
		stopping := s.mode != stopNone
		if !stopping && !madeAnew {
			s.prog.Foreign = newer + ", per the workspace's owner record"
			s.prog.ForeignUntil = s.r.opts.Now().Add(claim.DefaultDuration)
		}
		s.mu.Unlock()
		if stopping {
			return // already stopping for another reason, which stands
		}
		if madeAnew {
			s.log.Info("The workspace saw the session driven at a later claim epoch than this instance's claim (the claim's Lease was made anew); taking the claim again past that epoch",
				"claimEpoch", s.driver.Epoch, "workspaceHolder", owner.Holder, "workspaceEpoch", owner.Epoch)
		} else {
			s.log.Info("Superseded: the workspace refuses this instance as the session's driver; stopping at once",
				"reason", err.Error())
		}
		s.stop(stopDetach)
	})
}

// maxFenceFloor bounds the epochs a workspace's owner record can lift a
// claim's fence to, leaving the Lease's int32 count room to grow.
const maxFenceFloor = 1 << 30

// leaseMadeAnew reports whether owner, the driver a workspace refused this
// one for, is ahead of the claim this instance holds (claim.Claims.Behind:
// a later epoch, or the same under another holder), and then records the
// epoch after it as the session's fence floor, at most once per claim's
// duration.
func (s *session) leaseMadeAnew(owner *executor.Owner) bool {
	c := s.r.opts.Claims
	if owner == nil || c == nil || owner.Epoch >= maxFenceFloor {
		return false
	}
	return s.r.floors.raise(s.obj.UID, int32(owner.Epoch+1), s.r.opts.Now(), func() bool {
		ctx, cancel := context.WithTimeout(s.ctx, behindReadTimeout)
		defer cancel()
		behind, err := c.Behind(ctx, s.obj.Namespace, s.obj.UID, owner.Holder, owner.Epoch)
		if err != nil {
			s.log.Info("Could not read the session's claim after the workspace refused this instance", "reason", err.Error())
		}
		return behind
	})
}

// behindReadTimeout bounds the claim read of leaseMadeAnew; a claim that
// cannot be read is not taken for made anew.
const behindReadTimeout = 5 * time.Second

// fenceFloors remembers, per session, the epoch this instance's next claim
// must be taken at or past (claim.Claims.AcquireFrom).
type fenceFloors struct {
	mu sync.Mutex
	m  map[types.UID]fenceFloor
}

type fenceFloor struct {
	epoch int32
	at    time.Time
}

// raise sets uid's floor to epoch when none was set within a claim's
// duration before now and behind (called without the lock) says so, and
// reports whether it did. Floors older than that are dropped: the claim
// taken past them keeps its count.
func (f *fenceFloors) raise(uid types.UID, epoch int32, now time.Time, behind func() bool) bool {
	f.mu.Lock()
	for u, fl := range f.m {
		if now.Sub(fl.at) >= claim.DefaultDuration {
			delete(f.m, u)
		}
	}
	_, recent := f.m[uid]
	f.mu.Unlock()
	if recent || !behind() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[types.UID]fenceFloor)
	}
	f.m[uid] = fenceFloor{epoch: epoch, at: now}
	return true
}

// floor is uid's fence floor (0 without one).
func (f *fenceFloors) floor(uid types.UID) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[uid].epoch
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
