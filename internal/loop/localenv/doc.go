// Package localenv implements tool.ExecutionEnvironment on the local machine
// (seed 000 §4, LocalExecutionEnvironment).
//
// File operations are confined to a root directory by default: every path is
// resolved inside the root, and `..`, absolute paths elsewhere and symlinks
// that leave the root are refused with an error wrapping tool.ErrPathEscapes.
// Confinement uses an *os.Root, so every open is symlink-safe (openat with
// no-follow semantics) and cannot be raced after validation (seed 002 §3.5).
//
// Commands run with /bin/bash -c (or /bin/sh -c) in a new process group with a
// filtered environment. On timeout or cancellation the whole group receives
// SIGTERM, then SIGKILL after a grace period (2 s), and the partial output is
// returned. Commands are not sandboxed: only their working directory is
// checked against the root.
package localenv
