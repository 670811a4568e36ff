// Package changes records what a session changed in its workspace when an
// input ends Succeeded: a baseline commit taken at start, a commit of the
// whole work tree on the session's branch, the binary-safe patch
// base..head with its numstat (status.changes), the spec.outputs artifacts,
// all stored through a Store, and an optional push of the branch.
//
// Every git command runs in the workspace through the session's
// tool.ExecutionEnvironment (the workspace container), with no credentials.
// The push runs here, in the operator: the workspace only builds the pack
// of the new objects; the credentials stay in the operator's memory
// (go-git's smart-HTTP transport). See docs/design.md, "Changes out".
package changes
