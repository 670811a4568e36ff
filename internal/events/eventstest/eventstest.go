package eventstest

import (
	"testing"

	"github.com/agent-operator/agent-operator/internal/events"
)

// Start starts an embedded server with eo (its store in a test temporary
// directory unless eo.StoreDir is set), connects to it and returns the
// server and a publisher with the stream ensured. Everything is shut down
// when the test ends.
func Start(t testing.TB, eo events.EmbeddedOptions, po events.PublisherOptions) (*events.Embedded, *events.Publisher) {
	t.Helper()
	if eo.StoreDir == "" {
		eo.StoreDir = t.TempDir()
	}
	srv, err := events.StartEmbedded(t.Context(), eo)
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	pub, err := events.NewPublisher(nc, po)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	if err := pub.EnsureStream(t.Context()); err != nil {
		t.Fatalf("EnsureStream: %v", err)
	}
	return srv, pub
}
