package events

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop"
)

func TestRedactorString(t *testing.T) {
	r := NewRedactor("hunter2-secret-value", "abc") // "abc" is too short to be redacted
	tests := []struct {
		name, in, want string
	}{
		{"literal secret", "pw is hunter2-secret-value!", "pw is [REDACTED]!"},
		{"short literal ignored", "abc def", "abc def"},
		{"env assignment", "OPENAI_API_KEY=sk-123 next", "OPENAI_API_KEY=[REDACTED] next"},
		{"lowercase name", "export my_token=xyz", "export my_token=[REDACTED]"},
		{"bare name", "PASSWORD: swordfish", "PASSWORD: [REDACTED]"},
		{"json shape", `{"AWS_SECRET": "wJalr/K7"}`, `{"AWS_SECRET": "[REDACTED]"}`},
		{"single quoted", `DB_PASSWORD='p a s s'`, `DB_PASSWORD='[REDACTED]'`},
		{"credential", "GOOGLE_CREDENTIALS=/path/key.json", "GOOGLE_CREDENTIALS=[REDACTED]"},
		{"several lines", "A_TOKEN=1\nB=2\nC_SECRET=3", "A_TOKEN=[REDACTED]\nB=2\nC_SECRET=[REDACTED]"},
		{"plural tokens untouched", "max_tokens=4096", "max_tokens=4096"},
		{"no assignment", "the token is rotated daily", "the token is rotated daily"},
		{"unrelated text", "PATH=/usr/bin HOME=/root", "PATH=/usr/bin HOME=/root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	var nilR *Redactor
	if got := nilR.String("X_API_KEY=1 hunter2-secret-value"); got != "X_API_KEY=[REDACTED] hunter2-secret-value" {
		t.Errorf("nil redactor: %q", got)
	}
}

func TestRedactorJSON(t *testing.T) {
	r := NewRedactor(`se"cr<et>`)
	tests := []struct {
		name, in, want string
	}{
		{"untouched document is returned as is", `{"b": 1, "a": [true, null]}`, `{"b": 1, "a": [true, null]}`},
		{"keeps key order and numbers", `{"z":"se\"cr\u003cet\u003e","a":1.50,"m":[{"k":"v"},"x"],"n":null}`,
			`{"z":"[REDACTED]","a":1.50,"m":[{"k":"v"},"x"],"n":null}`},
		{"nested assignment", `{"data":{"output":"X_TOKEN=abc\n","usage":{"inputTokens":3}}}`,
			`{"data":{"output":"X_TOKEN=[REDACTED]\n","usage":{"inputTokens":3}}}`},
		{"escaped newline before separator", `{"o":"PASSWORD\n: swordfish"}`, `{"o":"PASSWORD\n: [REDACTED]"}`},
		{"escaped quotes around name", `{"o":"{\"GH_TOKEN\": \"abc\"}"}`, `{"o":"{\"GH_TOKEN\": \"[REDACTED]\"}"}`},
		{"empty containers", `{"a":{},"b":[],"c":"MY_SECRET=1"}`, `{"a":{},"b":[],"c":"MY_SECRET=[REDACTED]"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.JSON([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("JSON(%s) =\n %s\nwant\n %s", tt.in, got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("output is not valid JSON: %s", got)
			}
		})
	}
}

func env(seq, gen uint64) *Envelope { return &Envelope{Seq: seq, Gen: gen, Kind: loop.EventWarning} }

func TestSequencer(t *testing.T) {
	tests := []struct {
		name string
		in   []*Envelope
		want string // seq@gen of delivered envelopes
	}{
		{"in order", []*Envelope{env(1, 0), env(2, 0), env(3, 0)}, "1@0 2@0 3@0"},
		{"duplicates dropped", []*Envelope{env(1, 0), env(1, 0), env(2, 0), env(1, 0), env(2, 0)}, "1@0 2@0"},
		{"out of order restored", []*Envelope{env(2, 0), env(3, 0), env(1, 0)}, "1@0 2@0 3@0"},
		{"gap stops delivery", []*Envelope{env(1, 0), env(3, 0), env(4, 0)}, "1@0"},
		{"other incarnations ignored", []*Envelope{nil, env(1, 0), nil, env(2, 0)}, "1@0 2@0"},
		{"orphan replaced by successor", []*Envelope{env(1, 0), env(3, 0), env(2, 1), env(3, 1), env(4, 1)}, "1@0 2@1 3@1 4@1"},
		{"orphan after successor waits", []*Envelope{env(1, 0), env(2, 1), env(3, 0), env(3, 1)}, "1@0 2@1 3@1"},
		{"orphan beyond successor not delivered", []*Envelope{env(1, 0), env(5, 0), env(2, 1)}, "1@0 2@1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sequencer{next: 1, pending: map[uint64]*Envelope{}}
			var got []string
			for _, e := range tt.in {
				for _, r := range s.add(e) {
					got = append(got, itoa(r.Seq)+"@"+itoa(r.Gen))
				}
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("delivered %q, want %q", g, tt.want)
			}
		})
	}
}

func TestCheckSequence(t *testing.T) {
	ev := func(seq uint64, id string) loop.Event { return loop.Event{Seq: seq, SessionID: id} }
	tests := []struct {
		name    string
		in      []loop.Event
		wantErr string
	}{
		{"empty", nil, ""},
		{"ok", []loop.Event{ev(1, "a"), ev(2, "a"), ev(3, "a")}, ""},
		{"gap", []loop.Event{ev(1, "a"), ev(3, "a")}, "event 1 has seq 3, want 2"},
		{"duplicate", []loop.Event{ev(1, "a"), ev(2, "a"), ev(2, "a")}, "event 2 has seq 2, want 3"},
		{"not from 1", []loop.Event{ev(2, "a")}, "event 0 has seq 2, want 1"},
		{"mixed sessions", []loop.Event{ev(1, "a"), ev(2, "b")}, `belongs to session "b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSequence(tt.in)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("CheckSequence = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestStreamConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     StreamConfig
		wantErr string
	}{
		{"defaults", StreamConfig{}, ""},
		{"memory", StreamConfig{Storage: "memory", Replicas: 3}, ""},
		{"bad storage", StreamConfig{Storage: "disk"}, "storage"},
		{"interest retention", StreamConfig{Retention: "interest"}, "only limits"},
		{"bad discard", StreamConfig{Discard: "oldest"}, "discard"},
		{"too many replicas", StreamConfig{Replicas: 7}, "replicas"},
		{"tiny max msg size", StreamConfig{MaxMsgSize: 100}, "maxMsgSize"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
	d := DefaultStreamConfig()
	if d.Name != "AGENT_EVENTS" || d.Prefix != "agents" || d.Duplicates.Minutes() != 2 || d.Storage != "file" {
		t.Errorf("DefaultStreamConfig = %+v", d)
	}
}

func TestSessionSubjects(t *testing.T) {
	s := SessionRef{Namespace: "ns1", Name: "a.b.c-d", UID: "u"}
	if got := SessionSubject("agents", s, loop.EventToolCallEnd); got != "agents.ns1.a_b_c-d.tool_call_end" {
		t.Errorf("SessionSubject = %q", got)
	}
	if got := SessionFilter("agents", s); got != "agents.ns1.a_b_c-d.*" {
		t.Errorf("SessionFilter = %q", got)
	}
	if got := NameFromToken(SessionToken(s.Name)); got != s.Name {
		t.Errorf("token round trip = %q", got)
	}
	if got := MsgID("u", 7, 0); got != "u/7" {
		t.Errorf("MsgID gen 0 = %q", got)
	}
	if got := MsgID("u", 7, 2); got != "u/7/2" {
		t.Errorf("MsgID gen 2 = %q", got)
	}
	bad := []SessionRef{
		{Namespace: "a.b", Name: "x"},
		{Namespace: "ns", Name: "x*"},
		{Namespace: "ns", Name: "x>"},
		{Namespace: "ns", Name: "X"},
		{Namespace: "", Name: "x"},
		{Namespace: "ns", Name: "a b"},
	}
	for _, b := range bad {
		if err := ValidateSession(b); err == nil {
			t.Errorf("ValidateSession(%+v) = nil", b)
		}
	}
}
