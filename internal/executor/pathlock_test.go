package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop/localenv"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Children sharing a workspace each drive it over their own stream, so
// each talks to a serve process of its own: a conditional write must be
// atomic across them, not only within one, or two edits made against the
// same version both "succeed" and one is lost.
func TestConditionalWritesAreAtomicAcrossServeProcesses(t *testing.T) {
	root, owners := t.TempDir(), t.TempDir()
	var clients []*Client
	for range 2 {
		env, err := localenv.New(root) // each serve process has its own environment
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { env.Close() })
		cr, sw := io.Pipe()
		sr, cw := io.Pipe()
		go func() {
			_ = Serve(context.Background(), sr, sw, env, ServeOptions{OwnerDir: owners})
			sw.Close()
		}()
		c, err := NewClientContext(t.Context(), &duplex{Reader: cr, Writer: cw, closers: []io.Closer{cr, cw}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	const writers, rounds = 8, 40
	for round := range rounds {
		base := []byte(fmt.Sprintf("version %d\n", round))
		if err := os.WriteFile(filepath.Join(root, "shared.txt"), base, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(base)
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			wins int
		)
		for w := range writers {
			wg.Go(func() {
				err := clients[w%2].WriteFileIf(t.Context(), "shared.txt", []byte(fmt.Sprintf("edit %d of round %d\n", w, round)), hex.EncodeToString(sum[:]))
				switch {
				case err == nil:
					mu.Lock()
					wins++
					mu.Unlock()
				case !errors.Is(err, tool.ErrConflict):
					t.Errorf("writer %d: %v", w, err)
				}
			})
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("round %d: %d writes against the same version succeeded, want exactly 1", round, wins)
		}
	}
}

// The workload runs as the executor's user and can hold a path's shared
// lock forever: a write of that path must still complete (under the
// process's own lock, after the lock's timeout), never hang the session.
func TestAPathLockHeldForeverDoesNotHangWrites(t *testing.T) {
	owners := t.TempDir()
	s := serve(t, ServeOptions{OwnerDir: owners})
	c := newClient(t, s)
	abs := filepath.Join(s.env.WorkingDirectory(), "held.txt")
	hold, err := lockPathShared(t.Context(), owners, abs)
	if err != nil {
		t.Fatal(err)
	}
	defer hold()
	ctx, cancel := context.WithTimeout(t.Context(), 10*ownerLockTimeout)
	defer cancel()
	if err := c.WriteFile(ctx, "held.txt", []byte("written anyway\n")); err != nil {
		t.Fatalf("write under a held lock: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(s.root, "held.txt"))
	if err != nil || string(got) != "written anyway\n" {
		t.Fatalf("file = %q, %v", got, err)
	}
}
