package tool

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// FileView is what the model last saw of a file: the SHA-256 (hex) and size
// of the whole file when it was last read or written through a file tool.
type FileView struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// FileViews tracks, for one session and the subagents sharing its
// workspace, the FileView of every file the model read or wrote, and
// serializes the edits of each file (seed 002 FR-TOOL-PATCH-02). Keys are
// cleaned absolute paths. Implementations are safe for concurrent use.
type FileViews interface {
	// Seen returns the last view recorded for path.
	Seen(path string) (FileView, bool)
	// Record stores the view the model now has of path.
	Record(path string, v FileView)
	// Forget drops path (the file was deleted or moved away).
	Forget(path string)
	// Lock waits until no other edit of path is running, or ctx ends.
	Lock(ctx context.Context, path string) (unlock func(), err error)
}

// ErrConflict is wrapped by WriteFileIf errors when the file's content is
// no longer the one the write was computed from.
var ErrConflict = errors.New("the file changed since it was read")

// ConditionalWriter is implemented by environments that can write a file
// only if its current content still has a given SHA-256 (compare and swap),
// serialized with every other mutation of that path. ifSHA256 "" means the
// file must not exist.
type ConditionalWriter interface {
	WriteFileIf(ctx context.Context, path string, content []byte, ifSHA256 string) error
}

// WriteFileIf writes through env's ConditionalWriter when it has one, and
// with a plain WriteFile otherwise (the caller's own per-path lock is then
// the only serialization).
func WriteFileIf(ctx context.Context, env ExecutionEnvironment, path string, content []byte, ifSHA256 string) error {
	if cw, ok := env.(ConditionalWriter); ok {
		return cw.WriteFileIf(ctx, path, content, ifSHA256)
	}
	return env.WriteFile(ctx, path, content)
}

// WriteFileIf implements ConditionalWriter for a scoped environment.
func (e *scoped) WriteFileIf(ctx context.Context, p string, c []byte, ifSHA256 string) error {
	return WriteFileIf(ctx, e.ExecutionEnvironment, e.abs(p), c, ifSHA256)
}

// Views is the in-memory FileViews: what the model last saw of every file
// it read or wrote (SHA-256 and size of the whole file at that moment), and
// a lock per file that serializes the file tools' edits. It is safe for
// concurrent use.
type Views struct {
	mu    sync.Mutex
	views map[string]FileView
	locks map[string]*viewLock
}

type viewLock struct {
	ch   chan struct{} // capacity 1: holding the token is holding the lock
	refs int
}

var _ FileViews = (*Views)(nil)

// NewViews returns empty Views.
func NewViews() *Views {
	return &Views{views: map[string]FileView{}, locks: map[string]*viewLock{}}
}

// Seen implements FileViews.
func (f *Views) Seen(path string) (FileView, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.views[path]
	return v, ok
}

// Record implements FileViews.
func (f *Views) Record(path string, v FileView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.views[path] = v
}

// Forget implements FileViews.
func (f *Views) Forget(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.views, path)
}

// Lock implements FileViews.
func (f *Views) Lock(ctx context.Context, path string) (func(), error) {
	f.mu.Lock()
	l := f.locks[path]
	if l == nil {
		l = &viewLock{ch: make(chan struct{}, 1)}
		f.locks[path] = l
	}
	l.refs++
	f.mu.Unlock()
	release := func() {
		f.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(f.locks, path)
		}
		f.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, fmt.Errorf("wait for another edit of %s: %w", path, ctx.Err())
	}
}
