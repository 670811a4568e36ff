package loop_test

import (
	"encoding/json"
	"testing"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// TestEmitHostEvent: an idle session journals a host event with the next
// seq; an unknown kind is refused; a closed session refuses too.
func TestEmitHostEvent(t *testing.T) {
	env, _ := newEnv(t)
	s := newSession(t, anthropic(), env, script(text("done")))
	rec := record(s)
	if err := s.Submit(t.Context(), "hi"); err != nil {
		t.Fatal(err)
	}
	data := loop.EventData{Message: "1 file changed", Changes: json.RawMessage(`{"filesChanged":1}`)}
	if err := s.EmitHostEvent(t.Context(), loop.EventWarning, data); err == nil {
		t.Fatal("a loop event kind was emitted as a host event")
	}
	if err := s.EmitHostEvent(t.Context(), loop.EventChangesRecorded, data); err != nil {
		t.Fatalf("EmitHostEvent while idle: %v", err)
	}
	ev := rec.WaitFor(t, loop.EventChangesRecorded)
	if ev.Data.Message != data.Message || string(ev.Data.Changes) != string(data.Changes) {
		t.Fatalf("event data %+v", ev.Data)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	evs := rec.All(t)
	checkSeq(t, evs)
	if err := s.EmitHostEvent(t.Context(), loop.EventChangesRecorded, data); err == nil {
		t.Fatal("a closed session emitted a host event")
	}
}

// TestRestoreSkipsHostEvents: a journal holding CHANGES_RECORDED restores,
// and the next input's events continue its seq.
func TestRestoreSkipsHostEvents(t *testing.T) {
	env, _ := newEnv(t)
	s := newSession(t, anthropic(), env, script(text("done"), text("again")))
	rec := record(s)
	if err := s.Submit(t.Context(), "hi"); err != nil {
		t.Fatal(err)
	}
	if err := s.EmitHostEvent(t.Context(), loop.EventChangesRecorded, loop.EventData{Message: "m"}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, loop.EventChangesRecorded)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	journal := rec.All(t)
	var kept []loop.Event
	for _, ev := range journal {
		if ev.Kind != loop.EventSessionEnd || ev.Data.State != string(loop.StateClosed) {
			kept = append(kept, ev)
		}
	}
	if kept[len(kept)-1].Kind != loop.EventChangesRecorded {
		t.Fatalf("journal ends with %s", kept[len(kept)-1].Kind)
	}
	r := newSession(t, anthropic(), env, script(text("done"), text("again")), loop.WithID(s.ID()), loop.WithRestore(kept))
	rec2 := record(r)
	if err := r.Submit(t.Context(), "more"); err != nil {
		t.Fatalf("submit after restore: %v", err)
	}
	in := rec2.WaitFor(t, loop.EventUserInput)
	if want := kept[len(kept)-1].Seq + 1; in.Seq != want {
		t.Fatalf("USER_INPUT after restore has seq %d, want %d", in.Seq, want)
	}
}
