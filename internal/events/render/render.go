package render

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// Options configures a Renderer.
type Options struct {
	// Deltas prints ASSISTANT_TEXT_DELTA and TOOL_CALL_OUTPUT_DELTA as they
	// come (for live following); the END events then only close the block.
	// Without it the END events print the whole text or output.
	Deltas bool
	// MaxOutputLines bounds the tool output lines printed per call; 0 prints
	// everything. Cut output ends with a line saying how many were left out.
	MaxOutputLines int
	// Timestamps prefixes every block with the event time (UTC, HH:MM:SS).
	Timestamps bool
	// Indent is written at the start of every line (a subagent's events are
	// printed indented under its parent's).
	Indent string
}

// Renderer writes events as readable text. It is not safe for concurrent
// use; feed it the events of one session in seq order.
type Renderer struct {
	w    io.Writer
	opts Options
	// streaming state for Deltas
	inText      bool
	sawText     bool
	sawOutput   map[string]bool
	outputLines map[string]int
	err         error
}

// New returns a Renderer writing to w. Everything it writes is sanitized
// for a terminal (see Sanitize): escape sequences in model or tool output
// cannot reach the reader's terminal.
func New(w io.Writer, opts Options) *Renderer {
	w = NewWriter(w)
	if opts.Indent != "" {
		w = &indentWriter{w: w, indent: []byte(opts.Indent), atStart: true}
	}
	return &Renderer{w: w, opts: opts, sawOutput: map[string]bool{}, outputLines: map[string]int{}}
}

// Event renders one event and returns the first write error.
func (r *Renderer) Event(ev loop.Event) error {
	d := ev.Data
	switch ev.Kind {
	case loop.EventSessionStart:
		r.line(ev, "● session started%s", paren(d.State))
	case loop.EventSessionEnd:
		r.closeText()
		msg := "■ session ended" + paren(d.State)
		if d.Error != "" {
			msg += ": " + d.Error
		}
		r.line(ev, "%s", msg)
	case loop.EventUserInput:
		who := "user"
		if d.FollowUp {
			who = "user (follow-up)"
		}
		r.block(ev, "▶ "+who+": ", d.Content)
	case loop.EventSteeringInjected:
		r.block(ev, "↪ steering: ", d.Content)
	case loop.EventAssistantTextStart:
		r.sawText = false
	case loop.EventAssistantTextDelta:
		if !r.opts.Deltas {
			return r.err
		}
		if !r.inText {
			r.prefix(ev)
			r.printf("◆ assistant: ")
			r.inText = true
		}
		r.sawText = true
		r.printf("%s", d.Delta)
	case loop.EventAssistantTextEnd:
		if r.opts.Deltas && r.sawText {
			r.closeText()
		} else if strings.TrimSpace(d.Text) != "" {
			r.block(ev, "◆ assistant: ", d.Text)
		}
		r.sawText = false
		if d.Usage != nil {
			r.printf("    tokens: %d in, %d out\n", d.Usage.InputTokens, d.Usage.OutputTokens)
		}
	case loop.EventToolCallStart:
		r.closeText()
		r.line(ev, "⚙ %s %s", d.ToolName, oneLine(unescapeHTML(string(d.Arguments)), 160))
	case loop.EventToolCallOutputDelta:
		if !r.opts.Deltas {
			return r.err
		}
		r.sawOutput[d.CallID] = true
		r.output(d.CallID, d.Delta)
	case loop.EventToolCallEnd:
		mark, dur := "✓", ""
		if d.IsError {
			mark = "✗"
		}
		if d.DurationMs > 0 {
			dur = " (" + (time.Duration(d.DurationMs) * time.Millisecond).String() + ")"
		}
		r.line(ev, "%s %s%s", mark, d.ToolName, dur)
		if d.Error != "" {
			r.output(d.CallID, d.Error)
		}
		if !r.sawOutput[d.CallID] {
			r.output(d.CallID, d.Output)
		}
		r.endOutput(d.CallID)
	case loop.EventTurnLimit:
		r.line(ev, "! turn limit reached (round %d, total turns %d)", d.Round, d.TotalTurns)
	case loop.EventLoopDetection:
		r.block(ev, "! loop detected: ", d.Message)
	case loop.EventError:
		kind := ""
		if d.ErrorKind != "" {
			kind = " [" + d.ErrorKind + "]"
		}
		r.block(ev, "✗ error"+kind+": ", d.Message)
	case loop.EventWarning:
		r.block(ev, "! warning: ", d.Message)
	case loop.EventContextCompacted:
		r.compacted(ev)
	case loop.EventPlanUpdated:
		r.block(ev, "≡ ", loop.RenderPlan(d.Plan))
	case loop.EventChangesRecorded:
		r.block(ev, "± changes: ", d.Message)
	default:
		r.line(ev, "? %s", ev.Kind)
	}
	return r.err
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// output prints tool output indented, honouring MaxOutputLines.
func (r *Renderer) output(callID, s string) {
	if s == "" {
		return
	}
	for _, l := range strings.SplitAfter(s, "\n") {
		if l == "" {
			continue
		}
		r.outputLines[callID]++
		if limit := r.opts.MaxOutputLines; limit > 0 && r.outputLines[callID] > limit {
			continue
		}
		r.printf("    │ %s", l)
		if !strings.HasSuffix(l, "\n") {
			r.printf("\n")
		}
	}
}

func (r *Renderer) endOutput(callID string) {
	if limit := r.opts.MaxOutputLines; limit > 0 && r.outputLines[callID] > limit {
		r.printf("    │ … %d more lines\n", r.outputLines[callID]-limit)
	}
	delete(r.outputLines, callID)
	delete(r.sawOutput, callID)
}

func (r *Renderer) closeText() {
	if r.inText {
		r.printf("\n")
		r.inText = false
	}
}

// compacted prints a CONTEXT_COMPACTED event on one line.
func (r *Renderer) compacted(ev loop.Event) {
	c := ev.Data.Compaction
	if c == nil {
		r.line(ev, "⇢ context compacted")
		return
	}
	how := "summarized"
	if c.Dropped {
		how = "dropped: the summary failed"
	}
	forced := ""
	if c.Forced {
		forced = " after the provider rejected the request as too long"
	}
	r.line(ev, "⇢ context compacted%s: ~%d → ~%d tokens (%d turns %s, %s)", forced, c.TokensBefore, c.TokensAfter,
		c.Turns, how, (time.Duration(ev.Data.DurationMs) * time.Millisecond).String())
}

func (r *Renderer) prefix(ev loop.Event) {
	if r.opts.Timestamps {
		r.printf("%s ", ev.Time.UTC().Format("15:04:05"))
	}
}

func (r *Renderer) line(ev loop.Event, format string, args ...any) {
	r.closeText()
	r.prefix(ev)
	r.printf(format+"\n", args...)
}

// block prints a head followed by text whose continuation lines are indented.
func (r *Renderer) block(ev loop.Event, head, text string) {
	r.closeText()
	r.prefix(ev)
	text = strings.TrimRight(text, "\n")
	r.printf("%s%s\n", head, strings.ReplaceAll(text, "\n", "\n    "))
}

func (r *Renderer) printf(format string, args ...any) {
	if r.err != nil {
		return
	}
	_, r.err = fmt.Fprintf(r.w, format, args...)
}

// htmlEscapes are the escapes encoding/json writes for <, > and & by default.
var htmlEscapes = map[string]byte{"003c": '<', "003e": '>', "0026": '&'}

// unescapeHTML turns the \u003c, \u003e and \u0026 escapes of a JSON text
// back into <, > and &, so that `a && b > c` reads as written. Other escapes
// are kept, and an escaped backslash before "u0026" is not taken for one.
func unescapeHTML(s string) string {
	if !strings.Contains(s, `\u00`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		if c, ok := htmlEscapes[strings.ToLower(s[min(i+2, len(s)):min(i+6, len(s))])]; ok && s[i+1] == 'u' {
			b.WriteByte(c)
			i += 5
			continue
		}
		b.WriteString(s[i : i+2])
		i++
	}
	return b.String()
}

// oneLine collapses whitespace and cuts s to n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if rs := []rune(s); len(rs) > n {
		return string(rs[:n]) + "…"
	}
	return s
}

// indentWriter writes indent at the start of every line.
type indentWriter struct {
	w       io.Writer
	indent  []byte
	atStart bool
}

func (iw *indentWriter) Write(p []byte) (int, error) {
	var out []byte
	for _, b := range p {
		if iw.atStart {
			out = append(out, iw.indent...)
		}
		out = append(out, b)
		iw.atStart = b == '\n'
	}
	if _, err := iw.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
