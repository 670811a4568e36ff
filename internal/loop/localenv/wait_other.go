//go:build !linux

package localenv

// awaitExit returns at once: without pidfds the caller's Wait blocks a
// thread for as long as the command runs.
func awaitExit(int) {}
