package events

import (
	"strings"
	"unicode/utf8"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// holdSlack is how many bytes beyond the longest literal secret a delta
// stream may hold back (a sensitive name, its separator and a value).
const holdSlack = 1024

// maxDeltaStreams bounds the streams whose redaction context is kept; a
// stream that never ends is forgotten past it.
const maxDeltaStreams = 256

// streamKey names one delta stream: the assistant's text (CallID empty) or
// the output of one tool call.
type streamKey struct {
	kind loop.EventKind
	call string
}

// deltaStream is the redaction state of one stream. open is the end of the
// stream's text (already redacted as far as it is known) that may still
// be the start of a secret: a proper prefix of a literal secret, a
// sensitive name, or an assignment whose value may go on. Its first sent
// bytes are published; the rest is held back (only while the stream's
// latest delta is the held event).
type deltaStream struct {
	open string
	sent int
}

// deltaRedactor redacts ASSISTANT_TEXT_DELTA and TOOL_CALL_OUTPUT_DELTA
// across delta boundaries. A delta whose text ends with what may be the
// start of a secret is held (not yet published) with that end cut off;
// the cut bytes go out, redacted, with the stream's next delta, or are
// flushed into the held delta itself just before any other event is
// published. Seqs stay as the loop gave them: a delta may carry fewer or
// more bytes than it came with, possibly none. Not safe for concurrent use.
type deltaRedactor struct {
	r       *Redactor
	limit   int
	streams map[streamKey]*deltaStream
	held    *loop.Event
	heldKey streamKey
}

func newDeltaRedactor(r *Redactor) *deltaRedactor {
	limit := holdSlack
	if r != nil && len(r.secrets) > 0 {
		limit += len(r.secrets[0]) // longest first
	}
	return &deltaRedactor{r: r, limit: limit, streams: map[streamKey]*deltaStream{}}
}

// deltaStreamOf returns the stream ev belongs to and whether it is a delta;
// ok is false for events of no stream.
func deltaStreamOf(ev loop.Event) (key streamKey, delta, ok bool) {
	switch ev.Kind {
	case loop.EventAssistantTextDelta:
		return streamKey{kind: ev.Kind}, true, true
	case loop.EventAssistantTextStart, loop.EventAssistantTextEnd:
		return streamKey{kind: loop.EventAssistantTextDelta}, false, true
	case loop.EventToolCallOutputDelta:
		return streamKey{kind: ev.Kind, call: ev.Data.CallID}, true, true
	case loop.EventToolCallStart, loop.EventToolCallEnd:
		return streamKey{kind: loop.EventToolCallOutputDelta, call: ev.Data.CallID}, false, true
	}
	return streamKey{}, false, false
}

// heldSeq returns the seq of the held delta, 0 when none is held.
func (d *deltaRedactor) heldSeq() uint64 {
	if d.held == nil {
		return 0
	}
	return d.held.Seq
}

// next takes the event about to be appended and returns the events to
// publish now, in seq order: the held delta first (with the held bytes
// flushed into it unless ev continues its stream), then ev unless ev is
// a delta that is held in turn.
func (d *deltaRedactor) next(ev loop.Event) []loop.Event {
	key, delta, ok := deltaStreamOf(ev)
	var out []loop.Event
	if d.held != nil && (!delta || key != d.heldKey) {
		out = append(out, d.flush())
	} else if d.held != nil {
		out = append(out, *d.held) // its bytes held back go out with ev
		d.held = nil
	}
	switch {
	case delta:
		ev, hold := d.delta(key, ev)
		if hold {
			d.held, d.heldKey = &ev, key
		} else {
			out = append(out, ev)
		}
	case ok:
		delete(d.streams, key) // the stream starts anew or ended
		out = append(out, ev)
	default:
		if ev.Kind == loop.EventSessionEnd {
			clear(d.streams)
		}
		out = append(out, ev)
	}
	return out
}

// flush returns the held delta with every byte held back in it; the
// stream's text stays as context for its next delta.
func (d *deltaRedactor) flush() loop.Event {
	ev := *d.held
	d.held = nil
	if st := d.streams[d.heldKey]; st != nil {
		ev.Data.Delta += st.open[st.sent:]
		st.sent = len(st.open)
	}
	return ev
}

// delta redacts the stream's open text and ev's delta together and returns
// ev with the part that can no longer become a secret, and whether bytes
// are held back (ev must then be held).
func (d *deltaRedactor) delta(key streamKey, ev loop.Event) (loop.Event, bool) {
	st := d.streams[key]
	if st == nil {
		st = &deltaStream{}
	}
	red := d.r.String(st.open + ev.Data.Delta)
	// base: bytes of red already published (a literal secret completed by
	// this delta may have rewritten part of what was sent: then only the
	// rest goes out, the secret never whole).
	base := commonPrefix(red, st.open[:st.sent])
	c := d.openStart(red)
	cut := max(c, base)
	ev.Data.Delta = red[base:cut]
	st.open, st.sent = red[c:], cut-c
	if st.open == "" {
		delete(d.streams, key)
	} else if _, ok := d.streams[key]; !ok {
		if len(d.streams) >= maxDeltaStreams {
			for k := range d.streams { // forget one (no delta is held now)
				delete(d.streams, k)
				break
			}
		}
		d.streams[key] = st
	}
	return ev, cut < len(red)
}

// commonPrefix returns the length of the common prefix of a and b, at a
// rune boundary of a.
func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	for n > 0 && n < len(a) && !utf8.RuneStart(a[n]) {
		n--
	}
	return n
}

// openStart returns where the end of s that may still be (or begin) a
// secret starts: len(s) when none may, never more than d.limit bytes
// before the end, always at a rune boundary. s is already redacted, so a
// whole secret or a finished assignment in it is gone.
func (d *deltaRedactor) openStart(s string) int {
	n := len(s)
	floor := max(0, n-d.limit)
	for floor > 0 && floor < n && !utf8.RuneStart(s[floor]) {
		floor++
	}
	c := n
	// A proper prefix of a literal secret at the end.
	if d.r != nil {
		for _, sec := range d.r.secrets {
			for i := max(floor, n-len(sec)+1); i < n; i++ {
				if i < c && strings.HasPrefix(sec, s[i:]) {
					c = i
					break
				}
			}
		}
	}
	lower := asciiLower(s[floor:])
	for _, w := range sensitiveWords {
		word := string(w)
		// A sensitive name whose assignment is not finished: nothing, a
		// separator, an unclosed quote or a bare value up to the end.
		for from := 0; ; {
			i := strings.Index(lower[from:], word)
			if i < 0 {
				break
			}
			i += from
			if assignmentOpen(lower, i+len(word)) {
				c = min(c, floor+nameStart(lower, i))
				break
			}
			from = i + 1
		}
		// The start of a sensitive word at the end.
		for k := len(word) - 1; k >= 1; k-- {
			if strings.HasSuffix(lower, word[:k]) {
				c = min(c, n-k)
				break
			}
		}
	}
	// An assignment whose bare value reaches the end (it may go on).
	if locs := sensitiveAssignment.FindAllStringIndex(s[floor:], -1); len(locs) > 0 {
		if l := locs[len(locs)-1]; floor+l[1] == n {
			c = min(c, floor+l[0])
		}
	}
	for c > floor && c < n && !utf8.RuneStart(s[c]) {
		c--
	}
	return c
}

// assignmentOpen reports whether the text after a sensitive word at i may
// still become (or is) an assignment not yet finished at the end of s.
func assignmentOpen(s string, i int) bool {
	if i < len(s) && s[i-1] == 'l' && s[i] == 's' { // credentials
		i++
	}
	for i < len(s) && (s[i] == '"' || s[i] == '\'' || isBlank(s[i])) {
		i++
	}
	if i == len(s) {
		return true
	}
	if s[i] != '=' && s[i] != ':' {
		return false
	}
	i++
	for i < len(s) && isBlank(s[i]) {
		i++
	}
	if i == len(s) {
		return true
	}
	switch q := s[i]; q {
	case '"', '\'':
		return !strings.ContainsAny(s[i+1:], string(q)+"\n")
	default:
		return !strings.ContainsAny(s[i:], " \t\n\r\v\f\"',;}&")
	}
}

// nameStart returns where the assignment name around the word at i starts.
func nameStart(s string, i int) int {
	for i > 0 {
		b := s[i-1]
		if (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') || b == '_' || b == '.' || b == '-' {
			i--
			continue
		}
		break
	}
	return i
}

func isBlank(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

// asciiLower lower-cases ASCII letters only, so byte offsets stay.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
