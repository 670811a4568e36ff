package events

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-operator/agent-operator/internal/loop"
)

// authEnv is an embedded server requiring authentication, listening on a
// port, with the journals of a session in team-a and one in team-b.
func authEnv(t *testing.T) *testEnv {
	t.Helper()
	env := newTestEnv(t, EmbeddedOptions{Port: -1, Auth: true}, PublisherOptions{})
	for _, s := range []SessionRef{testSession, otherTenant} {
		j, _ := env.pub.NewJournal(s, 0, JournalOptions{})
		appendAll(t, t.Context(), j, scriptedEvents(s.UID, 6))
	}
	return env
}

var otherTenant = SessionRef{Namespace: "team-b", Name: "secret-work", UID: "9f1d-uid-b"}

func TestEmbeddedAuthRefusesConnectionsWithoutValidCredentials(t *testing.T) {
	env := authEnv(t)
	expired, err := env.srv.MintReader("team-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	env.srv.auth.mu.Lock()
	r := env.srv.auth.readers[expired.User]
	r.expires = time.Time{} // as if the hour had passed
	env.srv.auth.readers[expired.User] = r
	env.srv.auth.mu.Unlock()
	valid, err := env.srv.MintReader("team-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts []nats.Option
	}{
		{"no credentials", nil},
		{"a wrong token", []nats.Option{nats.Token("not-the-manager")}},
		{"an unknown user", []nats.Option{nats.UserInfo("reader-unknown", "x")}},
		{"a reader's wrong password", []nats.Option{nats.UserInfo(valid.User, valid.Password+"x")}},
		{"an expired reader", []nats.Option{nats.UserInfo(expired.User, expired.Password)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := nats.Connect(env.srv.ClientURL(), append(tt.opts, nats.NoReconnect())...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
				t.Fatalf("error %v, want an authorization violation", err)
			}
		})
	}
	// The control: the valid reader connects.
	nc, err := Connect(t.Context(), env.srv.ClientURL(), ConnectOptions{Reader: &valid})
	if err != nil {
		t.Fatalf("a valid reader could not connect: %v", err)
	}
	nc.Close()
}

// TestReaderReadsItsNamespaceOnly: a reader of team-a replays and follows
// team-a's session, but cannot read team-b's (replay, follow or a plain
// subscription) and cannot publish anything.
func TestReaderReadsItsNamespaceOnly(t *testing.T) {
	env := authEnv(t)
	cred, err := env.srv.MintReader("team-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	violations := make(chan error, 16)
	nc, err := Connect(t.Context(), env.srv.ClientURL(), ConnectOptions{Reader: &cred})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case violations <- err:
		default:
		}
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	evs, err := Replay(ctx, js, testSession)
	if err != nil || len(evs) != 6 {
		t.Fatalf("replay of its own namespace: %d events, %v", len(evs), err)
	}
	var followed int
	err = Follow(ctx, js, testSession, 1, func(loop.Event) error {
		followed++
		if followed == 6 {
			return ErrStop
		}
		return nil
	})
	if err != nil || followed != 6 {
		t.Fatalf("follow of its own namespace: %d events, %v", followed, err)
	}

	short, cancelShort := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancelShort()
	if evs, err := Replay(short, js, otherTenant); err == nil || len(evs) != 0 {
		t.Errorf("replay of another namespace: %d events, err %v; want refused", len(evs), err)
	}

	sub, err := nc.SubscribeSync("agents.team-b.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nextViolation(t, violations, "subscription"); err == nil {
		t.Error("subscribing to team-b's subjects was allowed")
	}
	if _, err := sub.NextMsg(100 * time.Millisecond); err == nil {
		t.Error("a message of team-b reached the reader")
	}

	for _, subj := range []string{"agents.team-a.fix_the-bug.user_input", "agents.team-b.secret-work.user_input", "$JS.API.STREAM.DELETE.AGENT_EVENTS"} {
		if err := nc.Publish(subj, []byte(`{"forged":true}`)); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := nextViolation(t, violations, "publish"); err == nil {
			t.Errorf("publishing to %s was allowed", subj)
		}
	}
	if got, err := Replay(ctx, env.js, testSession); err != nil || len(got) != 6 {
		t.Errorf("the journal changed: %d events, %v", len(got), err)
	}
	if _, err := env.js.Stream(ctx, DefaultStreamName); err != nil {
		t.Errorf("the stream is gone: %v", err)
	}
}

// nextViolation returns the permissions violation the server reported for
// the last operation of kind, or nil when none came before a PING round trip
// (the server reports violations before it answers the flush).
func nextViolation(t *testing.T, ch <-chan error, kind string) error {
	t.Helper()
	select {
	case err := <-ch:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("%s: unexpected error %v", kind, err)
		}
		return err
	case <-time.After(2 * time.Second):
		return nil
	}
}
