package render

import (
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop"
)

func TestSanitize(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain text, newline and tab kept", "a\tb\nc é ✓", "a\tb\nc é ✓"},
		{"SGR colour removed", "\x1b[1;31mred\x1b[0m", "red"},
		{"cursor moves and erase removed", "x\x1b[2J\x1b[H\x1b[?25ly", "xy"},
		{"OSC title ended by BEL removed", "\x1b]0;pwned\x07after", "after"},
		{"OSC 8 hyperlink ended by ST removed", "\x1b]8;;https://evil\x1b\\click\x1b]8;;\x1b\\", "click"},
		{"OSC 52 clipboard write removed", "\x1b]52;c;cm0gLXJmIH4=\x07ok", "ok"},
		{"DCS string removed", "\x1bPq#0;2;0;0;0\x1b\\ok", "ok"},
		{"two-byte ESC sequences removed", "\x1bc\x1b7\x1b(Bok", "ok"},
		{"C1 CSI removed", "\u009b31mred", "red"},
		{"C1 OSC ended by C1 ST removed", "\u009d0;t\u009cok", "ok"},
		{"unterminated OSC shown inert", "\x1b]0;title", "^[]0;title"},
		{"lone ESC at end shown", "a\x1b", "a^["},
		{"incomplete CSI shown", "a\x1b[12", "a^[[12"},
		{"BEL, backspace, CR shown", "a\x07b\x08c\rd", "a^Gb^Hc^Md"},
		{"CRLF becomes LF", "a\r\nb\r\n", "a\nb\n"},
		{"DEL and NUL shown", "a\x7fb\x00", "a^?b^@"},
		{"other C1 shown", "a\u0085b", "a^[Eb"},
		{"bidi override shown", "x\u202egnp.exe", "x<U+202E>gnp.exe"},
		{"invalid UTF-8 replaced", "a\xffb", "a\uFFFDb"},
		{"ESC inside OSC ends it unsuccessfully", "\x1b]0;a\x1b[31mb", "^[]0;ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Sanitize(tt.in); got != tt.want {
				t.Errorf("Sanitize(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestSanitizeJSONKeepsTheValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"a":"x"}`, `{"a":"x"}`},
		{"{\"a\":\"\u009b31m\u202e\x7f\"}\n", `{"a":"\u009b31m\u202e\u007f"}` + "\n"},
	}
	for _, tt := range tests {
		if got := SanitizeJSON(tt.in); got != tt.want {
			t.Errorf("SanitizeJSON(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestRendererNeutralizesEscapeSequences is the golden test of FR-OUT-02:
// a tool output holding ANSI and OSC sequences renders as inert bytes, live
// and replayed; the event itself is not changed.
func TestRendererNeutralizesEscapeSequences(t *testing.T) {
	hostile := "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m\n\x1b]52;c;ZWNobyBoaQ==\x07clip\x1b[1A\rover\n\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n"
	evs := []loop.Event{
		ev(loop.EventToolCallStart, loop.EventData{ToolName: "read_file", CallID: "c1", Arguments: []byte(`{"path":"a\u001b[31m.txt"}`)}),
		ev(loop.EventToolCallOutputDelta, loop.EventData{CallID: "c1", Delta: hostile}),
		ev(loop.EventToolCallEnd, loop.EventData{ToolName: "read_file", CallID: "c1", Output: hostile}),
		ev(loop.EventAssistantTextEnd, loop.EventData{Text: "done\x1b]0;t\x07 \u009b2J"}),
	}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"replay", Options{}, "⚙ read_file {\"path\":\"a\\u001b[31m.txt\"}\n" +
			"✓ read_file\n" +
			"    │ red\n" +
			"    │ clip^Mover\n" +
			"    │ link\n" +
			"◆ assistant: done \n"},
		{"live, indented", Options{Deltas: true, Indent: "  "}, "  ⚙ read_file {\"path\":\"a\\u001b[31m.txt\"}\n" +
			"      │ red\n" +
			"      │ clip^Mover\n" +
			"      │ link\n" +
			"  ✓ read_file\n" +
			"  ◆ assistant: done \n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			r := New(&b, tt.opts)
			for _, e := range evs {
				if err := r.Event(e); err != nil {
					t.Fatal(err)
				}
			}
			if got := b.String(); got != tt.want {
				t.Errorf("rendered bytes:\n%q\nwant:\n%q", got, tt.want)
			}
			if strings.ContainsAny(b.String(), "\x1b\x07\r\u009b") {
				t.Errorf("rendered output holds a control character: %q", b.String())
			}
			if evs[1].Data.Delta != hostile {
				t.Error("the event was changed")
			}
		})
	}
}
