//go:build !linux

package executor

// ProtectProcess does nothing outside Linux: workspace pods run on Linux,
// and there is no portable equivalent of PR_SET_DUMPABLE.
func ProtectProcess() error { return nil }

// Dumpable reports 1 outside Linux (not protected).
func Dumpable() (int, error) { return 1, nil }
