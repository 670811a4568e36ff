package builtin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// MaxTrackBytes is the largest file whose content hash read_file records
// (larger files cannot be edited by the file tools anyway).
const MaxTrackBytes = MaxWriteBytes

// requiresRead reports whether the variant refuses to edit (or overwrite)
// an existing file the model never read in this conversation: Claude Code
// does; codex and gemini-cli do not. A file changed since the model's last
// read is refused by every variant.
func requiresRead(v Variant) bool { return v == Anthropic }

// viewKey is the key of p in the file views: a cleaned absolute path.
func viewKey(env tool.ExecutionEnvironment, p string) string {
	if !path.IsAbs(p) {
		p = path.Join(env.WorkingDirectory(), p)
	}
	return path.Clean(p)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func viewOf(content []byte) tool.FileView {
	return tool.FileView{SHA256: sha256Hex(content), Size: int64(len(content))}
}

// StaleFileError is a file the model must read (again) before editing it
// (seed 002 ToolError::StaleFile).
type StaleFileError struct {
	File   string
	Reason string
}

func (e *StaleFileError) Error() string {
	return fmt.Sprintf("StaleFile: %s: %s. Read it again with read_file, then redo the change against its current content", e.File, e.Reason)
}

// Reasons of StaleFileError (seed 002 FR-TOOL-PATCH-02a/b).
const (
	reasonNotRead = "the file was not read before editing"
	reasonChanged = "the file content changed since it was last read (by a command, another agent or the user)"
)

// checkFresh returns a *StaleFileError when the model's view of the file p
// (with its current content) is missing (and the variant requires a read)
// or differs from the content.
func checkFresh(inv *tool.Invocation, v Variant, p string, current []byte) error {
	if inv.Files == nil {
		return nil
	}
	seen, ok := inv.Files.Seen(viewKey(inv.Env, p))
	switch {
	case !ok && requiresRead(v):
		return &StaleFileError{File: p, Reason: reasonNotRead}
	case !ok:
		return nil
	case seen.SHA256 == "" || seen.SHA256 != sha256Hex(current):
		return &StaleFileError{File: p, Reason: reasonChanged}
	}
	return nil
}

// record stores the model's new view of p.
func record(inv *tool.Invocation, p string, content []byte) {
	if inv.Files != nil {
		inv.Files.Record(viewKey(inv.Env, p), viewOf(content))
	}
}

// forget drops p from the views (deleted or moved away).
func forget(inv *tool.Invocation, p string) {
	if inv.Files != nil {
		inv.Files.Forget(viewKey(inv.Env, p))
	}
}

// lockPaths takes the per-file edit locks of paths in a fixed order (so two
// calls never wait on each other crosswise) and returns the release.
func lockPaths(ctx context.Context, inv *tool.Invocation, paths ...string) (func(), error) {
	if inv.Files == nil {
		return func() {}, nil
	}
	keys := make([]string, 0, len(paths))
	for _, p := range paths {
		keys = append(keys, viewKey(inv.Env, p))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var unlocks []func()
	release := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	for _, k := range keys {
		u, err := inv.Files.Lock(ctx, k)
		if err != nil {
			release()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return release, nil
}

// conflictMessage is the result of a conditional write that lost a race.
func conflictMessage(p string) string {
	return (&StaleFileError{File: p, Reason: "the file was changed by someone else while this edit was being applied; no change was made"}).Error() + "."
}

// isConflict reports a lost compare-and-swap write.
func isConflict(err error) bool { return errors.Is(err, tool.ErrConflict) }
