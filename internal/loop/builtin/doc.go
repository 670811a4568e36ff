// Package builtin holds the built-in tools of seed 000 §3 (read_file,
// write_file, edit_file, shell, grep, glob, list_dir, read_many_files,
// apply_patch and the subagent tools of §7). Each constructor returns a
// tool.Registered: a Definition whose JSON Schema root is an object, and an
// Executor that works over any tool.ExecutionEnvironment.
//
// A Variant selects each provider's native descriptions and extras (codex
// style for OpenAI, Claude Code style for Anthropic, gemini-cli style for
// Gemini). The base parameters of seed 000 §3.3 exist in every variant under
// the same names. Tools(v) returns the toolset seed 000 lists for a provider.
//
// Conventions shared by all tools:
//   - Paths may be absolute or relative to the environment's working
//     directory; the environment resolves and confines them.
//   - Anything the model can fix (bad arguments, missing file, non-unique
//     edit, non-zero exit, timeout) is a Result with IsError set and a nil
//     error. A non-nil error is returned only when ctx is done.
//   - Tools do not truncate their output (the loop does, seed 000 §5); they
//     only enforce hard safety caps on input sizes (MaxWriteBytes,
//     MaxPatchBytes), cap what they build before building it (edit_file
//     results, read_file's MaxReadLimit lines) and stream at most
//     MaxStreamBytes of a command's output.
//   - Read tracking (Invocation.Files): read_file and every write record the
//     SHA-256 of what the model saw; edit_file, write_file and apply_patch
//     refuse a file changed since (StaleFile), the Anthropic variant also a
//     file never read, and write with a compare-and-swap on that hash
//     (tool.WriteFileIf) under a per-file lock, so concurrent edits compose
//     or fail, never lose an update.
//   - shell: a non-zero exit code is an error result (seed 000 ShellExitError:
//     the model inspects the output and fixes it), and so is a timeout.
//   - wait: a subagent that finished unsuccessfully is reported in the JSON
//     ("success": false) but is not an error result; only failing to wait is.
package builtin
