package events

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A listening embedded server is reachable over TCP with Connect, and a
// restart keeps its port and its store.
func TestEmbeddedListeningRestart(t *testing.T) {
	ctx := t.Context()
	srv, err := StartEmbedded(ctx, EmbeddedOptions{StoreDir: t.TempDir(), Port: -1, MaxStore: 64 << 20, MaxMemory: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":-1") {
		t.Fatalf("ClientURL = %q", url)
	}
	nc, err := Connect(ctx, url, ConnectOptions{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := NewPublisher(nc, PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.EnsureStream(ctx); err != nil {
		t.Fatal(err)
	}
	j, _ := pub.NewJournal(testSession, 0, JournalOptions{})
	evs := scriptedEvents(testSession.UID, 12)
	appendAll(t, ctx, j, evs)

	srv.Stop()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := srv.ClientURL(); got != url {
		t.Errorf("URL after restart %q, want %q", got, url)
	}
	nc2, err := Connect(ctx, url, ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc2.Close)
	pub2, _ := NewPublisher(nc2, PublisherOptions{})
	got, err := Replay(ctx, pub2.JetStream(), testSession)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, got); diff != "" {
		t.Errorf("after restart (-want +got):\n%s", diff)
	}
}

func TestEmbeddedInProcessHasNoURL(t *testing.T) {
	srv, err := StartEmbedded(t.Context(), EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if u := srv.ClientURL(); u != "" {
		t.Errorf("ClientURL = %q for an in-process server", u)
	}
	srv.Shutdown()
	if err := srv.Start(t.Context()); err == nil {
		t.Error("Start after Shutdown succeeded")
	}
	if _, err := srv.InProcessConn(); err == nil {
		t.Error("InProcessConn after Shutdown succeeded")
	}
}

func TestConnectErrors(t *testing.T) {
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		url  string
		opts ConnectOptions
		want string
	}{
		{"empty url", t.Context(), "", ConnectOptions{}, "empty url"},
		{"missing nkey seed", t.Context(), "nats://127.0.0.1:1", ConnectOptions{NKeySeedFile: filepath.Join(t.TempDir(), "none")}, "nkey"},
		{"cancelled", canceled, "nats://127.0.0.1:1", ConnectOptions{}, "canceled"},
		{"nothing listening", t.Context(), "nats://127.0.0.1:1", ConnectOptions{}, "connect nats"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := Connect(tt.ctx, tt.url, tt.opts)
			if err == nil {
				nc.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Connect = %v, want error containing %q", err, tt.want)
			}
		})
	}
	if _, err := StartEmbedded(t.Context(), EmbeddedOptions{}); err == nil {
		t.Error("StartEmbedded without a store dir succeeded")
	}
}
