package executor

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ProtectProcess makes the calling process non-dumpable
// (prctl(PR_SET_DUMPABLE, 0)). Processes of the same user without
// CAP_SYS_PTRACE can then no longer open its /proc/PID/fd/* (its stdin and
// stdout are the control stream), read /proc/PID/mem (the stream key) or
// ptrace it. Children regain the dumpable flag when they exec, so commands
// are unaffected. The executor sidecar calls it first thing; see
// docs/security.md ("Control-stream integrity").
func ProtectProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("protect process: prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// Dumpable reports the calling process's dumpable flag (0: protected).
func Dumpable() (int, error) {
	v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return 0, fmt.Errorf("prctl(PR_GET_DUMPABLE): %w", err)
	}
	return v, nil
}
