package runner

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/eventstest"
)

// A NATS server that comes back without its store (the stream gone) while
// a session runs: the session goes on and finishes, its tool run once,
// instead of waiting with JournalAvailable=False until the manager
// restarts (the old code's only EnsureStream).
func TestSessionGoesOnWhenTheStreamIsLost(t *testing.T) {
	_, pub := eventstest.Start(t, events.EmbeddedOptions{}, events.PublisherOptions{AckTimeout: 300 * time.Millisecond})
	g := startGated(t, pub, "stream-lost", func(types.NamespacedName) {})
	if err := pub.JetStream().DeleteStream(t.Context(), pub.StreamConfig().Name); err != nil {
		t.Fatal(err)
	}
	g.release()
	end := waitProgress(t, g.r, g.obj.UID, "the session succeeded with the journal available", func(p Progress) bool {
		return p.Phase == agentsv1.PhaseSucceeded && p.JournalAvailable
	})
	if end.Result != "done" || end.ToolCalls != 1 || g.model.calls.Load() != 2 {
		t.Errorf("result %q, tool calls %d, model calls %d; want done, 1, 2", end.Result, end.ToolCalls, g.model.calls.Load())
	}
	if b, err := os.ReadFile(filepath.Join(g.dir, "runs.log")); err != nil || string(b) != "ran\n" {
		t.Errorf("runs.log = %q, %v; want the tool to have run once", b, err)
	}
}
