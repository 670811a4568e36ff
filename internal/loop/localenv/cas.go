package localenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

var _ tool.ConditionalWriter = (*Env)(nil)

// casLocks serializes conditional writes of one path within an Env.
type casLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (c *casLocks) get(key string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.locks == nil {
		c.locks = map[string]*sync.Mutex{}
	}
	m := c.locks[key]
	if m == nil {
		m = &sync.Mutex{}
		c.locks[key] = m
	}
	return m
}

// WriteFileIf writes content only if the file's current SHA-256 (hex) is
// ifSHA256, or, with ifSHA256 "", only if the file does not exist; else it
// returns an error wrapping tool.ErrConflict and changes nothing. The check
// and the write are atomic with respect to other WriteFileIf calls on this
// Env.
func (e *Env) WriteFileIf(ctx context.Context, p string, content []byte, ifSHA256 string) error {
	rel, err := e.resolve(p)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	m := e.cas.get(rel)
	m.Lock()
	defer m.Unlock()
	cur, err := e.fsys.ReadFile(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if ifSHA256 != "" {
			return fmt.Errorf("write %s: %w (it was deleted)", p, tool.ErrConflict)
		}
	case err != nil:
		return mapErr("write", p, err)
	default:
		sum := sha256.Sum256(cur)
		if hex.EncodeToString(sum[:]) != ifSHA256 {
			return fmt.Errorf("write %s: %w", p, tool.ErrConflict)
		}
	}
	return e.WriteFile(ctx, p, content)
}
