package builtin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// fallbackTimeout is used when the Invocation carries no DefaultTimeout
// (seed 000 default_command_timeout_ms).
const fallbackTimeout = 10 * time.Second

// killedExitCode is the exit code of a command killed by SIGKILL (128+9).
const killedExitCode = 137

// KilledMessage follows the output of a command that ended by SIGKILL without
// timing out: in a workspace that is almost always the kernel's out-of-memory
// killer enforcing the memory limit, which the model can work around.
const KilledMessage = "[ERROR: The command was killed by SIGKILL (exit code 137), most likely by the out-of-memory " +
	"killer: the environment has a memory limit. Use less memory (smaller inputs, streaming, fewer parallel jobs).]"

// TimeoutMessage is the exact text appended on timeout (seed 000 §5.4);
// %d is the timeout in milliseconds.
const TimeoutMessage = "[ERROR: Command timed out after %dms. Partial output is shown above.\n" +
	"You can retry with a longer timeout by setting the timeout_ms parameter.]"

// Shell returns the shell tool. It runs the command through
// env.ExecCommand with Invocation.DefaultTimeout, or timeout_ms capped at
// Invocation.MaxTimeout, streams output through Invocation.Output, and
// returns the exit code, duration and combined stdout and stderr. A non-zero
// exit or a timeout is an error result.
func Shell(v Variant) tool.Registered {
	desc := pick(v, map[Variant]string{
		OpenAI: "Runs a shell command (bash -c) in the working directory and returns its output. " +
			"Returns the exit code, the wall time and the combined stdout and stderr. " +
			"Commands time out after 10 seconds unless timeout_ms is set; set it for builds and test suites.",
		Anthropic: "Executes a given bash command with an optional timeout.\n\n" +
			"Usage notes:\n" +
			"- The command argument is required.\n" +
			"- You can specify an optional timeout in milliseconds (timeout_ms). If not specified, the session's default timeout applies; the session also caps the maximum.\n" +
			"- It is very helpful if you write a clear, concise description of what this command does in 5-10 words.\n" +
			"- Avoid using this tool to run `find`, `grep`, `cat`, `head`, `tail`, `sed`, `awk`, or `echo` commands; use the dedicated tools (glob, grep, read_file, edit_file, write_file) instead.\n" +
			"- When issuing multiple commands, use ';' or '&&' to separate them. DO NOT use newlines (newlines are ok in quoted strings).\n" +
			"- Try to maintain your current working directory by using absolute paths and avoiding `cd`.",
		Gemini: "This tool executes a given shell command as `bash -c <command>`. Command can start background processes using `&`. " +
			"Command is executed as a subprocess in its own process group.\n\n" +
			"The following information is returned:\n\n" +
			"Exit code: exit code of the command.\n" +
			"Duration: wall time of the command.\n" +
			"Output: combined stdout and stderr of the command.",
	})
	schema := objectSchema([]string{"command"},
		p("command", "string", pick(v, map[Variant]string{
			OpenAI:    "The shell command to execute.",
			Anthropic: "The command to execute",
			Gemini:    "Exact bash command to execute as `bash -c <command>`",
		})),
		namedProp{"timeout_ms", prop{Type: "integer", Minimum: intMin(1), Description: pick(v, map[Variant]string{
			OpenAI:    "The timeout for the command in milliseconds (default 10000).",
			Anthropic: "Optional timeout in milliseconds",
			Gemini:    "Optional: timeout in milliseconds (default 10000). Set it for long builds or test runs.",
		})}},
		p("description", "string", pick(v, map[Variant]string{
			OpenAI: "Optional short description of what the command does.",
			Anthropic: "Clear, concise description of what this command does in 5-10 words. Examples:\n" +
				"Input: ls\nOutput: Lists files in current directory\n\n" +
				"Input: git status\nOutput: Shows working tree status",
			Gemini: "Brief description of the command for the user. Be specific and concise. Ideally a single sentence.",
		})),
	)
	return tool.Registered{
		Definition: tool.Definition{Name: "shell", Description: desc, Parameters: schema},
		Executor:   shell,
	}
}

type shellArgs struct {
	Command     string  `json:"command"`
	TimeoutMS   flexInt `json:"timeout_ms"`
	Description string  `json:"description"`
}

// commandTimeout is the effective timeout of a call.
func commandTimeout(inv *tool.Invocation, ms int) time.Duration {
	t := inv.DefaultTimeout
	if t <= 0 {
		t = fallbackTimeout
	}
	if ms > 0 {
		t = time.Duration(ms) * time.Millisecond
	}
	if inv.MaxTimeout > 0 && t > inv.MaxTimeout {
		t = inv.MaxTimeout
	}
	return t
}

func shell(ctx context.Context, inv *tool.Invocation) (tool.Result, error) {
	var a shellArgs
	if msg, ok := decode(inv, &a); !ok {
		return errorResult("%s", msg)
	}
	if strings.TrimSpace(a.Command) == "" {
		return errorResult("Error: the \"command\" parameter is required and must not be empty.")
	}
	if a.TimeoutMS.v < 0 {
		return errorResult("Error: timeout_ms must be a positive number of milliseconds (got %d).", a.TimeoutMS.v)
	}
	timeout := commandTimeout(inv, a.TimeoutMS.v)
	out := inv.Output
	if out == nil {
		out = func(string) {}
	}
	co := newCoalescer(out, StreamFlushInterval, StreamFlushBytes)
	res, err := inv.Env.ExecCommand(ctx, a.Command, tool.ExecOptions{
		Timeout:  timeout,
		OnOutput: capStream(MaxStreamBytes, co.write),
	})
	// What is pending is delivered now, before the call's result (and so
	// before its TOOL_CALL_END); nothing is delivered after.
	co.close()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return tool.Result{}, cerr
		}
		return errorResult("Error: failed to run the command: %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Exit code: %d\nDuration: %s\nOutput:\n", res.ExitCode, res.Duration.Round(time.Millisecond))
	b.WriteString(res.Stdout)
	if res.Stderr != "" {
		if res.Stdout != "" && !strings.HasSuffix(res.Stdout, "\n") {
			b.WriteByte('\n')
		}
		b.WriteString(res.Stderr)
	}
	switch {
	case res.TimedOut:
		if s := b.String(); !strings.HasSuffix(s, "\n") {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, TimeoutMessage, timeout.Milliseconds())
	case res.ExitCode == killedExitCode:
		if s := b.String(); !strings.HasSuffix(s, "\n") {
			b.WriteByte('\n')
		}
		b.WriteString(KilledMessage)
	}
	return tool.Result{Output: b.String(), IsError: res.TimedOut || res.ExitCode != 0}, nil
}

// StreamFlushInterval and StreamFlushBytes coalesce a call's streamed
// output: small writes are gathered and delivered as one
// TOOL_CALL_OUTPUT_DELTA at most StreamFlushInterval after the first of
// them, or as soon as StreamFlushBytes are pending, whichever comes first,
// so a command writing one byte at a time produces at most about one event
// per interval plus one per StreamFlushBytes, not one per write.
const (
	StreamFlushInterval = 100 * time.Millisecond
	StreamFlushBytes    = 16 << 10
)

// MaxStreamBytes caps the output one shell call streams as
// TOOL_CALL_OUTPUT_DELTA events: the model sees at most the (truncated)
// final output, so the live view of a command printing gigabytes stops
// after this much, with one marker, instead of flooding the event stream.
const MaxStreamBytes = 1 << 20

// streamCappedMarker ends the streamed output of a call that hit the cap.
const streamCappedMarker = "\n[streamed output capped at %d bytes; the command keeps running and its final output is truncated as usual]\n"

// capStream returns an OnOutput callback forwarding at most max bytes of
// chunks to out, then the marker once, then nothing. It is called from one
// goroutine per command.
func capStream(max int, out func(string)) func([]byte) {
	sent := 0
	return func(chunk []byte) {
		if sent > max {
			return
		}
		if sent+len(chunk) > max {
			if rest := max - sent; rest > 0 {
				out(string(chunk[:rest]))
			}
			out(fmt.Sprintf(streamCappedMarker, max))
			sent = max + 1
			return
		}
		sent += len(chunk)
		out(string(chunk))
	}
}

// coalescer gathers streamed output and delivers it to out in order, as one
// string per flush: when bytes are pending (StreamFlushBytes), when interval
// has passed since the first pending write, and at close. out is called with
// the lock held, so deliveries never overlap or reorder.
type coalescer struct {
	out      func(string)
	interval time.Duration
	bytes    int

	mu      sync.Mutex
	pending []byte
	timer   *time.Timer // armed while bytes are pending
	armed   uint64      // counts armings, so a stale tick does nothing
	closed  bool
}

func newCoalescer(out func(string), interval time.Duration, bytes int) *coalescer {
	return &coalescer{out: out, interval: interval, bytes: bytes}
}

// write queues chunk; it delivers at once when enough is pending.
func (c *coalescer) write(chunk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || chunk == "" {
		return
	}
	c.pending = append(c.pending, chunk...)
	if len(c.pending) >= c.bytes {
		c.flushLocked()
		return
	}
	if c.timer == nil {
		c.armed++
		n := c.armed
		c.timer = time.AfterFunc(c.interval, func() { c.tick(n) })
	}
}

// tick is the flush of the n-th arming of the timer; a tick whose timer was
// stopped or replaced meanwhile does nothing.
func (c *coalescer) tick(n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || n != c.armed || c.timer == nil {
		return
	}
	c.timer = nil
	c.flushLocked()
}

// flushLocked delivers what is pending and disarms the timer.
func (c *coalescer) flushLocked() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if len(c.pending) == 0 {
		return
	}
	s := string(c.pending)
	c.pending = c.pending[:0]
	c.out(s)
}

// close delivers what is pending; later writes and ticks deliver nothing.
func (c *coalescer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.flushLocked()
	c.closed = true
}
