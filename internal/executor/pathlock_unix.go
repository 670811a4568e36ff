//go:build unix

package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"golang.org/x/sys/unix"
)

// lockPathShared takes the lock of the file at abs that every serve process
// of the pod shares (an flock on "path-<hash>.lock" in dir, the owner
// records' directory): children sharing a workspace each drive it over a
// stream of their own, so an in-process lock alone would let two of them
// check a file's hash and write it at once, and lose an edit.
func lockPathShared(ctx context.Context, dir, abs string) (func(), error) {
	dfd, err := openOwnerDir(dir)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", abs, err)
	}
	defer unix.Close(dfd) // the lock's own descriptor stays open
	sum := sha256.Sum256([]byte(abs))
	unlock, err := lockOwnerRecord(ctx, dfd, "path-"+hex.EncodeToString(sum[:16]))
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", abs, err)
	}
	return unlock, nil
}
