package loop

import (
	"fmt"
	"time"

	"github.com/agent-operator/agent-operator/internal/llm"
)

// Defaults of the seed 002 limits (FR-LIM-01, -03) and of the per-tool
// timeouts of the non-shell tools.
const (
	DefaultMaxToolCallsPerBatch = 8
	DefaultMaxToolArgsBytes     = 256 << 10
	// DefaultMaxPatchArgsBytes bounds apply_patch arguments: the patch
	// limit (FR-LIM-04, 512 KiB, enforced by the tool) plus JSON overhead.
	DefaultMaxPatchArgsBytes = 512<<10 + 64<<10
	DefaultFileToolTimeout   = 30 * time.Second
)

// ToolLimits are the per-batch and per-call limits checked before a tool
// runs; each exceeded limit pre-resolves the call as an error result and the
// other calls of the batch still run (FR-LIM-06). Zero fields take the
// defaults above.
type ToolLimits struct {
	// MaxToolCallsPerBatch: calls after this many in one assistant
	// response are not run (FR-LIM-01, default 8).
	MaxToolCallsPerBatch int
	// MaxToolArgsBytes bounds the JSON arguments of a call (FR-LIM-03,
	// default 256 KiB; apply_patch: DefaultMaxPatchArgsBytes).
	MaxToolArgsBytes int
	// FileToolTimeout bounds one call of read_file, read_many_files,
	// grep, glob, list_dir, edit_file and apply_patch (default 30 s): the
	// last two match text in the manager's process. shell has its own
	// timeouts.
	FileToolTimeout time.Duration
}

func (l ToolLimits) calls() int {
	if l.MaxToolCallsPerBatch > 0 {
		return l.MaxToolCallsPerBatch
	}
	return DefaultMaxToolCallsPerBatch
}

func (l ToolLimits) argsBytes(name string) int {
	if l.MaxToolArgsBytes > 0 {
		return l.MaxToolArgsBytes
	}
	if name == "apply_patch" {
		return DefaultMaxPatchArgsBytes
	}
	return DefaultMaxToolArgsBytes
}

// timedTools are the tools run under FileToolTimeout.
var timedTools = map[string]bool{
	"read_file": true, "read_many_files": true, "grep": true, "glob": true, "list_dir": true,
	"edit_file": true, "apply_patch": true,
}

func (l ToolLimits) timeout(name string) time.Duration {
	if !timedTools[name] {
		return 0
	}
	if l.FileToolTimeout > 0 {
		return l.FileToolTimeout
	}
	return DefaultFileToolTimeout
}

// preResolve returns, per call, the error that stops it before it runs (""
// when it may run): a duplicate call id of the batch (FR-VAL-02a), a call
// beyond the batch limit (FR-LIM-01) or arguments above the size limit
// (FR-LIM-03).
func (l ToolLimits) preResolve(calls []llm.ToolCall) []string {
	out := make([]string, len(calls))
	seen := make(map[string]bool, len(calls))
	run := 0
	for i, c := range calls {
		switch {
		case seen[c.ID]:
			out[i] = fmt.Sprintf("Tool error (%s): not run: the tool call id %q appears more than once in this response; every call needs its own id", c.Name, c.ID)
		case run >= l.calls():
			out[i] = fmt.Sprintf("Tool error (%s): not run: at most %d tool calls run per response (this was call %d); make the remaining calls in your next response", c.Name, l.calls(), i+1)
		case len(c.Arguments) > l.argsBytes(c.Name):
			out[i] = fmt.Sprintf("Tool error (%s): not run: the arguments are %d bytes, more than the limit of %d bytes; split the work into smaller calls (e.g. write a file in parts)", c.Name, len(c.Arguments), l.argsBytes(c.Name))
		default:
			run++
		}
		seen[c.ID] = true
	}
	return out
}
