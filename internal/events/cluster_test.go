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
	// listeners first, and for the client listeners too, all held until
	// every one is taken: a client port the kernel chose itself could be a
	// cluster port reserved (and released) for a server not started yet.
	ports := freePorts(t, 2*n)
	var routes []*url.URL
	for i := range n {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	var servers []*server.Server
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: ports[n+i],
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

// freePorts returns n distinct free loopback ports.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
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
	got, err := Replay(ctx, pub.JetStream(), testSession, FromLeader())
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
	got, err = Replay(ctx, pub.JetStream(), testSession, FromLeader())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("replayed %d events after the takeover, want %d", len(got), len(evs))
	}
}

// followerURL returns the client URL of a server that is not the leader of
// the journal's stream: queue-group requests prefer a local responder, so a
// direct get sent there is answered by that follower.
func followerURL(t *testing.T, servers []*server.Server, pub *Publisher) string {
	t.Helper()
	st, err := pub.JetStream().Stream(t.Context(), DefaultStreamConfig().Name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatal("the stream has no leader")
	}
	for _, s := range servers {
		if s.Name() != info.Cluster.Leader {
			return s.ClientURL()
		}
	}
	t.Fatal("no follower")
	return ""
}

// A journal read on a replicated stream through a follower (the client's
// server is one) sees every acknowledged event. A follower applies an entry
// only after it learns that the entry is committed, so under a burst of
// publishes its direct get answer lags the acknowledged journal; a resume
// that trusted it would lose the newest events and could reuse a crashed
// writer's generation (a CI run on a busy machine replayed 81 of 100).
// Every burst is acknowledged (Sync) before the reads.
func TestJournalReadsThroughAFollowerSeeEveryAcknowledgedEvent(t *testing.T) {
	servers := startCluster(t, 3)
	admin := replicatedPublisher(t, servers, 3)
	nc, err := nats.Connect(followerURL(t, servers, admin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub, err := NewPublisher(nc, PublisherOptions{Stream: StreamConfig{Replicas: 3}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Other sessions keep the stream busy, as on a shared manager: the
	// followers apply a backlog while this session's journal is read.
	busy, stopBusy := context.WithCancel(ctx)
	defer stopBusy()
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		payload := make([]byte, 32<<10)
		for i := 0; busy.Err() == nil; i++ {
			_, _ = admin.JetStream().PublishAsync(fmt.Sprintf("%s.team-b.load-%d.x", DefaultStreamConfig().Prefix, i%16), payload)
			if i%64 == 63 {
				select {
				case <-admin.JetStream().PublishAsyncComplete():
				case <-busy.Done():
				}
			}
		}
	}()
	defer func() { stopBusy(); <-loaded }()
	const bursts, size = 12, 40
	evs := scriptedEvents(testSession.UID, bursts*size)
	j, _, err := pub.OpenJournal(ctx, testSession, JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for b := range bursts {
		appendAll(t, ctx, j, evs[b*size:(b+1)*size])
		want := (b + 1) * size
		got, err := Replay(ctx, pub.JetStream(), testSession, FromLeader())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Fatalf("burst %d: Replay(FromLeader) returned %d events, want %d", b, len(got), want)
		}
		// A resume (a new writer) replays the same journal through the
		// follower, and continues it.
		next, resumed, err := pub.OpenJournal(ctx, testSession, JournalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resumed) != want {
			t.Fatalf("burst %d: OpenJournal replayed %d events, want %d", b, len(resumed), want)
		}
		j = next
	}
}
