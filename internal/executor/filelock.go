package executor

import (
	"context"
	"fmt"
	"path"
	"sync"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// keyLocks is a mutex per key for the callers of one process: a caller
// waits without polling and is woken as soon as the one before leaves, or
// gives up when its context ends. An entry lives while someone holds or
// waits for it. The zero value is ready to use.
type keyLocks[K comparable] struct {
	mu    sync.Mutex
	locks map[K]*keyLock
}

type keyLock struct {
	ch   chan struct{} // capacity 1: holding the token is holding the lock
	refs int           // holders and waiters
}

// lock waits for key's lock or for ctx to end (then it returns ctx's error).
func (l *keyLocks[K]) lock(ctx context.Context, key K) (func(), error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[K]*keyLock{}
	}
	kl := l.locks[key]
	if kl == nil {
		kl = &keyLock{ch: make(chan struct{}, 1)}
		l.locks[key] = kl
	}
	kl.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		kl.refs--
		if kl.refs == 0 {
			delete(l.locks, key)
		}
		l.mu.Unlock()
	}
	select {
	case kl.ch <- struct{}{}:
		return func() { <-kl.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// pathLocks serializes the mutations (write_file, delete_file) of each
// path inside the executor, so concurrent edits of one file from one round
// or from subagents sharing the workspace apply one at a time; different
// paths stay parallel. The zero value is ready to use.
type pathLocks struct {
	keys keyLocks[string]
}

// lock waits for the lock of p (cleaned; relative paths are taken as given,
// which is how the environment resolves them against one working directory)
// or for ctx to end.
func (l *pathLocks) lock(ctx context.Context, p string) (func(), error) {
	unlock, err := l.keys.lock(ctx, path.Clean(p))
	if err != nil {
		return nil, fmt.Errorf("wait for other writes of %s: %w", p, err)
	}
	return unlock, nil
}

// lockPath takes the lock of path p in this process, then the one shared
// with the pod's other serve processes (keyed by the absolute path, as
// their working directories may differ).
func (s *server) lockPath(ctx context.Context, p string) (func(), error) {
	unlock, err := s.paths.lock(ctx, p)
	if err != nil {
		return nil, err
	}
	abs := p
	if !path.IsAbs(abs) {
		abs = path.Join(s.env.WorkingDirectory(), p)
	}
	unlockShared, err := lockPathShared(ctx, s.ownerDir, path.Clean(abs))
	if err != nil {
		if ctx.Err() != nil {
			unlock()
			return nil, err
		}
		// The directory is not usable (not this user's, tampered with by
		// the workload) or the lock is held past its timeout: the workload
		// can only have done that to its own sessions, whose concurrent
		// edits across streams then race as they did before; the write
		// goes on under this process's lock.
		s.sharedLockFailed.Do(func() {
			s.log.Info("Writes are serialized within this serve process only", "reason", err.Error())
		})
		return unlock, nil
	}
	return func() { unlockShared(); unlock() }, nil
}

// write runs one write_file request under the path's lock: a conditional
// write when a.IfSHA256 is set (tool.ErrConflict if the file changed), a
// plain one otherwise.
func (s *server) write(ctx context.Context, a PathArgs) error {
	unlock, err := s.lockPath(ctx, a.Path)
	if err != nil {
		return err
	}
	defer unlock()
	if a.IfSHA256 != nil {
		return tool.WriteFileIf(ctx, s.env, a.Path, a.Content, *a.IfSHA256)
	}
	return s.env.WriteFile(ctx, a.Path, a.Content)
}

// remove runs one delete_file request under the path's lock.
func (s *server) remove(ctx context.Context, a PathArgs) error {
	unlock, err := s.lockPath(ctx, a.Path)
	if err != nil {
		return err
	}
	defer unlock()
	return s.env.DeleteFile(ctx, a.Path)
}

// WriteFileIf implements tool.ConditionalWriter: the executor writes content
// only if the file's current SHA-256 is ifSHA256 ("" = the file must not
// exist), serialized with every other mutation of the path. An executor
// that predates the field ignores it and writes unconditionally.
func (c *Client) WriteFileIf(ctx context.Context, path string, content []byte, ifSHA256 string) error {
	return c.do(ctx, OpWriteFile, PathArgs{Path: path, Content: content, IfSHA256: &ifSHA256}, nil, nil)
}
