package events

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// startCluster starts n NATS servers with JetStream as one cluster on
// loopback and returns them once every one accepts clients.
func startCluster(t *testing.T, n int) []*server.Server {
	t.Helper()
	// Every server routes to every other: take free ports for the cluster
	// listeners first.
	ports := make([]int, n)
	var routes []*url.URL
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	var servers []*server.Server
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "journal", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		servers = append(servers, s)
	}
	for i, s := range servers {
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %d did not start", i)
		}
	}
	return servers
}

// replicatedPublisher connects to the cluster and creates the stream with
// replicas replicas, waiting for the cluster's JetStream to elect a leader.
func replicatedPublisher(t *testing.T, servers []*server.Server, replicas int) *Publisher {
	t.Helper()
	nc, err := nats.Connect(servers[0].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := NewPublisher(nc, PublisherOptions{Stream: StreamConfig{Replicas: replicas}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := pub.EnsureStream(ctx)
		cancel()
		if err == nil {
			return pub
		}
		if time.Now().After(deadline) {
			t.Fatalf("create the stream with %d replicas: %v", replicas, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// On a stream with 3 replicas (the production layout on a NATS cluster) a
// writer keeps many fenced publishes in flight: the server refuses all but
// one of them with a constant "wrong last sequence" error, which is not a
// takeover. The journal must tell the two apart: every event is stored,
// once, and the writer is never told it was fenced; a writer that really
// lost the journal still is.
func TestFencedJournalOnAReplicatedStream(t *testing.T) {
	pub := replicatedPublisher(t, startCluster(t, 3), 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	evs := scriptedEvents(testSession.UID, 120)

	var fenced []error
	a, _, err := pub.OpenJournal(ctx, testSession, JournalOptions{OnStateChange: func(ok bool, err error) {
		if !ok && errors.Is(err, ErrFenced) {
			fenced = append(fenced, err)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, ctx, a, evs[:100])
	if len(fenced) > 0 {
		t.Fatalf("the only writer was told it was fenced: %v", fenced[0])
	}
	got, err := Replay(ctx, pub.JetStream(), testSession)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 {
		t.Fatalf("replayed %d events, want 100", len(got))
	}

	// B takes over; A's next append is refused as fenced.
	b, _, err := pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, evs[100]); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("the superseded writer's Sync = %v, want ErrFenced", err)
	}
	appendAll(t, ctx, b, evs[100:])
	got, err = Replay(ctx, pub.JetStream(), testSession)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("replayed %d events after the takeover, want %d", len(got), len(evs))
	}
}
