package runner

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop"
)

func deliveryRunner() *Runner {
	return &Runner{opts: Options{Notify: func(types.NamespacedName) {}, NotifyInterval: time.Hour, Now: time.Now}}
}

// The manager stopped after status recorded m2 as delivered and before the
// journal had it: the restored runner trusts the journal, so m2 is given
// again (once), and m1, which the journal holds, is not.
func TestRestoreGivesAgainWhatStatusRecordedButTheJournalLacks(t *testing.T) {
	obj := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u"},
		Spec: agentsv1.AgentSessionSpec{Prompt: "start", Messages: []agentsv1.Message{
			{Name: "m1", Kind: agentsv1.MessageFollowUp, Text: "first"},
			{Name: "m2", Kind: agentsv1.MessageSteer, Text: "second"},
		}},
		Status: agentsv1.AgentSessionStatus{MessagesDelivered: []string{"m1", "m2"}},
	}
	s := newSession(deliveryRunner(), obj, "pod")
	s.offer(obj.Spec.Messages)
	if len(s.queue) != 0 {
		t.Fatalf("before the journal is read, status's deliveries stand: queued %v", s.queue)
	}
	at := time.Unix(100, 0)
	ev := func(seq uint64, kind loop.EventKind, d loop.EventData) loop.Event {
		return loop.Event{Seq: seq, Kind: kind, SessionID: "u", Time: at.Add(time.Duration(seq) * time.Second), Data: d}
	}
	s.restored([]loop.Event{
		ev(1, loop.EventSessionStart, loop.EventData{}),
		ev(2, loop.EventUserInput, loop.EventData{Content: "start"}),
		ev(3, loop.EventSessionEnd, loop.EventData{State: string(loop.StateIdle)}),
		ev(4, loop.EventUserInput, loop.EventData{Content: "first", FollowUp: true}),
		ev(5, loop.EventSessionEnd, loop.EventData{State: string(loop.StateIdle)}),
	})
	p := s.snapshot()
	if !slices.Equal(p.Delivered, []string{"m1"}) || !p.Restored {
		t.Errorf("delivered %v (restored %v), want the journal's [m1]", p.Delivered, p.Restored)
	}
	if len(s.queue) != 1 || s.queue[0].Name != "m2" {
		t.Errorf("queued %v, want m2 given again", s.queue)
	}
	s.offer(obj.Spec.Messages)
	if len(s.queue) != 1 {
		t.Errorf("offering again queued %d messages, want m2 once", len(s.queue))
	}
	if w := p.WorkingTime(at.Add(time.Hour)); w != 2*time.Second {
		t.Errorf("working time %s, want the two inputs' 1s each (idle time not counted)", w)
	}
}

// A message handed to the loop and never journaled (a steer still queued
// when the input ended) is taken back when the runner ends, so the next
// runner gives it again; a journaled one stays delivered.
func TestEndedRunnerTakesBackWhatTheLoopNeverJournaled(t *testing.T) {
	obj := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u"}}
	s := newSession(deliveryRunner(), obj, "pod")
	s.handOver(agentsv1.Message{Name: "journaled", Text: "a"})
	s.handOver(agentsv1.Message{Name: "lost", Text: "b"})
	events := make(chan loop.Event, 1)
	events <- loop.Event{Seq: 1, Kind: loop.EventSteeringInjected, Data: loop.EventData{Content: "a"}}
	close(events)
	done := make(chan struct{})
	s.consume(events, done)
	if p := s.snapshot(); !slices.Equal(p.Delivered, []string{"journaled", "lost"}) {
		t.Fatalf("while running: delivered %v, want both (handed over)", p.Delivered)
	}
	s.takeBack()
	if p := s.snapshot(); !slices.Equal(p.Delivered, []string{"journaled"}) {
		t.Errorf("after the runner ended: delivered %v, want [journaled]", p.Delivered)
	}
}
