package events

import (
	"strings"
	"testing"
)

func TestPurgeSession(t *testing.T) {
	tests := []struct {
		name        string
		uid         string // uid passed to PurgeSession
		wantObjects int    // large events left (of 3)
	}{
		{"all incarnations", "", 1},
		{"one incarnation", "uid-new", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{Stream: StreamConfig{MaxMsgSize: 16 << 10}})
			old := SessionRef{Namespace: "ns", Name: "a.b", UID: "uid-old"}
			cur := SessionRef{Namespace: "ns", Name: "a.b", UID: "uid-new"}
			other := SessionRef{Namespace: "ns", Name: "a-b", UID: "uid-other"}
			for _, s := range []SessionRef{old, cur, other} {
				j, _ := env.pub.NewJournal(s, 0, JournalOptions{})
				evs := scriptedEvents(s.UID, 6)
				evs[5].Data.Output = strings.Repeat("x", 40<<10)
				appendAll(t, ctx, j, evs)
			}
			target := cur
			target.UID = tt.uid
			if err := PurgeSession(ctx, env.js, target); err != nil {
				t.Fatal(err)
			}
			for _, s := range []SessionRef{old, cur} {
				if got, err := Replay(ctx, env.js, s); err != nil || len(got) != 0 {
					t.Errorf("%s: %d events left, %v", s.UID, len(got), err)
				}
			}
			if got, err := Replay(ctx, env.js, other); err != nil || len(got) != 6 {
				t.Errorf("other session: %d events, %v", len(got), err)
			}
			obs, _ := env.js.ObjectStore(ctx, DefaultLargeBucket)
			infos, _ := obs.List(ctx)
			if len(infos) != tt.wantObjects {
				t.Errorf("%d large events left, want %d", len(infos), tt.wantObjects)
			}
			for _, info := range infos {
				if strings.HasPrefix(info.Name, "uid-new/") {
					t.Errorf("large event %s of the purged session left", info.Name)
				}
			}
		})
	}
}
