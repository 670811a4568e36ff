//go:build !unix

package executor

import (
	"context"
	"errors"
)

// checkOwnerRecord refuses every owner-checked stream: owner records need
// the file locking and *at system calls of a unix system.
func checkOwnerRecord(_ context.Context, _ string, o Owner) error {
	return &unusableRecordError{uid: o.SessionUID, err: errors.New("owner records are only kept on unix systems")}
}
