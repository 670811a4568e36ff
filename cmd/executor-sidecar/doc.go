// Command executor-sidecar runs inside workspace pods. It serves the
// executor protocol (package internal/executor) on stdin/stdout over a local
// execution environment confined to a root, keeps a container alive, and
// installs itself into a shared volume.
//
// Usage:
//
//	executor-sidecar serve --root /workspace [--env-policy core|all|none] [--max-frame BYTES] [--owner-dir DIR]
//	executor-sidecar idle
//	executor-sidecar copy-to DIR
//	executor-sidecar best-effort [--timeout DURATION] -- COMMAND [ARG...]
//	executor-sidecar version
//
// serve logs only to stderr. --owner-dir (default
// /tmp/agent-executor-owners) is where the serve processes of a pod keep
// the owner record of each session, so a stream of a superseded driver is
// refused (see internal/executor, "Owner records"). idle sleeps until SIGTERM or SIGINT (exit 0)
// and reaps zombie children, so it can be a container's PID 1. copy-to
// copies the running binary to DIR/executor-sidecar (for an init container
// filling an emptyDir, so any workspace image can run it) with mode 0111.
// best-effort runs COMMAND in the core environment, kills its process group
// after the timeout (default 1m) and exits 0 whatever happened: it is the
// workspace container's postStart hook, which records the change baseline
// (a failing hook would kill the container).
//
// serve and idle first make themselves non-dumpable, so the commands they
// run (the same uid) can neither open their /proc/PID/fd/* nor read their
// memory; with the 0111 install the kernel already starts them that way.
// See docs/security.md ("Control-stream integrity").
package main
