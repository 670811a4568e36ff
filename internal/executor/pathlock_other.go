//go:build !unix

package executor

import "context"

// lockPathShared is a no-op where there is no flock: one serve process per
// workspace is all such a system runs, and its in-process lock serializes.
func lockPathShared(context.Context, string, string) (func(), error) { return func() {}, nil }
