package render

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Sanitize makes s safe to print on a terminal (seed 002, FR-OUT-02): it
// keeps printable text, newlines and tabs, and neutralizes everything a
// terminal would interpret.
//
//   - Complete escape sequences are removed: CSI (ESC [ or U+009B, e.g.
//     colours and cursor moves), OSC (ESC ] or U+009D, e.g. window titles
//     and hyperlinks, ended by BEL or ST), DCS, SOS, PM and APC strings, and
//     the two- or three-byte ESC sequences (ESC c, ESC ( B, ...).
//   - Any other C0 control, DEL and C1 control is shown in caret notation
//     (ESC as ^[, BEL as ^G, CR as ^M, DEL as ^?, a C1 control as ^[ and
//     its 7-bit equivalent), so that an incomplete sequence prints inert.
//     CR directly before LF is dropped (CRLF line ends print as lines).
//   - Unicode bidirectional overrides and isolates (U+202A..U+202E,
//     U+2066..U+2069), which reorder what the reader sees, are shown as
//     <U+202E>.
//   - Bytes that are not UTF-8 become U+FFFD.
//
// Events keep the raw bytes; only what is printed is sanitized.
func Sanitize(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r' && i+1 < len(s) && s[i+1] == '\n':
			// CRLF prints as LF.
		case r == 0x1b || isC1(r):
			if end, ok := sequenceEnd(s, i); ok {
				i = end
				continue
			}
			b.WriteString(caret(r))
		case r < 0x20 || r == 0x7f:
			b.WriteString(caret(r))
		case isBidi(r):
			fmt.Fprintf(&b, "<U+%04X>", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// clean reports whether s has nothing Sanitize would change.
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return cleanUTF8(s[i:])
		}
		if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func cleanUTF8(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || isC1(r) || isBidi(r) {
			return false
		}
	}
	return true
}

func isC1(r rune) bool { return r >= 0x80 && r <= 0x9f }

func isBidi(r rune) bool { return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) }

// caret writes a control character visibly.
func caret(r rune) string {
	switch {
	case r == 0x7f:
		return "^?"
	case r < 0x20:
		return "^" + string(rune(r+0x40))
	default: // C1: ESC and the 7-bit equivalent
		return "^[" + string(rune(r-0x40))
	}
}

// sequenceEnd returns the index just after the complete escape sequence
// starting at s[i] (ESC or a C1 control), or false when there is none.
func sequenceEnd(s string, i int) (int, bool) {
	var kind byte // the 7-bit final of the introducer: '[', ']', 'P', ...
	p := i
	if s[i] == 0x1b {
		if i+1 >= len(s) {
			return 0, false
		}
		kind, p = s[i+1], i+2
	} else {
		r, n := utf8.DecodeRuneInString(s[i:])
		kind, p = byte(r-0x40), i+n
	}
	switch {
	case kind == '[':
		return csiEnd(s, p)
	case kind == ']' || kind == 'P' || kind == 'X' || kind == '^' || kind == '_':
		return stringEnd(s, p)
	case s[i] != 0x1b:
		return 0, false // any other C1 is one control
	case kind >= 0x20 && kind <= 0x2f: // ESC intermediates final
		for p < len(s) && s[p] >= 0x20 && s[p] <= 0x2f {
			p++
		}
		if p < len(s) && s[p] >= 0x30 && s[p] <= 0x7e {
			return p + 1, true
		}
		return 0, false
	case kind >= 0x30 && kind <= 0x7e:
		return p, true
	}
	return 0, false
}

// csiEnd parses parameter bytes, intermediate bytes and the final byte.
func csiEnd(s string, p int) (int, bool) {
	for p < len(s) && s[p] >= 0x30 && s[p] <= 0x3f {
		p++
	}
	for p < len(s) && s[p] >= 0x20 && s[p] <= 0x2f {
		p++
	}
	if p < len(s) && s[p] >= 0x40 && s[p] <= 0x7e {
		return p + 1, true
	}
	return 0, false
}

// stringEnd finds the end of a control string: BEL, ESC \ or U+009C. Any
// other ESC or C1 inside ends the search unsuccessfully, so the rest is
// sanitized on its own.
func stringEnd(s string, p int) (int, bool) {
	for p < len(s) {
		switch {
		case s[p] == 0x07:
			return p + 1, true
		case s[p] == 0x1b:
			if p+1 < len(s) && s[p+1] == '\\' {
				return p + 2, true
			}
			return 0, false
		case strings.HasPrefix(s[p:], "\u009c"):
			return p + len("\u009c"), true
		case s[p] == 0xc2 && p+1 < len(s) && s[p+1] >= 0x80 && s[p+1] <= 0x9f:
			return 0, false
		}
		p++
	}
	return 0, false
}

// NewWriter returns a writer that sanitizes every write to w (see
// Sanitize). Each write is sanitized on its own: write whole strings.
func NewWriter(w io.Writer) io.Writer {
	if sw, ok := w.(*sanitizingWriter); ok {
		return sw
	}
	return &sanitizingWriter{w: w}
}

type sanitizingWriter struct{ w io.Writer }

func (sw *sanitizingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(sw.w, Sanitize(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// SanitizeJSON makes one line of JSON text safe to print on a terminal
// without changing the values it encodes: encoding/json already escapes the
// C0 controls, and SanitizeJSON escapes DEL, the C1 controls and the
// bidirectional overrides as \uXXXX (outside strings JSON has none of them).
func SanitizeJSON(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r == 0x7f || isC1(r) || isBidi(r) || (r < 0x20 && r != '\n' && r != '\t'):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r) // invalid bytes become U+FFFD
		}
	}
	return b.String()
}

// NewJSONWriter returns a writer applying SanitizeJSON to every write.
func NewJSONWriter(w io.Writer) io.Writer { return jsonWriter{w: w} }

type jsonWriter struct{ w io.Writer }

func (jw jsonWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(jw.w, SanitizeJSON(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
