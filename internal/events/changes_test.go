package events

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestChangesStoreRoundTrip: objects put for a session are read back by
// uid and, for the newest incarnation, by name alone; a missing object or
// bucket is ErrNoChanges.
func TestChangesStoreRoundTrip(t *testing.T) {
	env := newTestEnv(t, EmbeddedOptions{}, PublisherOptions{})
	ctx := t.Context()
	store := env.pub.ChangesStore()
	js := env.pub.JetStream()
	patch := []byte("diff --git a/x b/x\n\x00binary-safe\xff\n")
	if err := store.PutObject(ctx, "team-a", "fix", "uid-1", "changes.patch", []byte("old incarnation")); err != nil {
		t.Fatal(err)
	}
	if err := store.PutObject(ctx, "team-a", "fix", "uid-2", "changes.patch", patch); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		ref     SessionRef
		object  string
		want    []byte
		wantErr error
	}{
		{"by uid", SessionRef{Namespace: "team-a", Name: "fix", UID: "uid-2"}, "changes.patch", patch, nil},
		{"an older incarnation by uid", SessionRef{Namespace: "team-a", Name: "fix", UID: "uid-1"}, "changes.patch", []byte("old incarnation"), nil},
		{"the newest by name", SessionRef{Namespace: "team-a", Name: "fix"}, "changes.patch", patch, nil},
		{"a missing object", SessionRef{Namespace: "team-a", Name: "fix", UID: "uid-2"}, "changes.json", nil, ErrNoChanges},
		{"an unknown name", SessionRef{Namespace: "team-a", Name: "other"}, "changes.patch", nil, ErrNoChanges},
		{"a namespace without bucket", SessionRef{Namespace: "team-z", Name: "fix"}, "changes.patch", nil, ErrNoChanges},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadChanges(ctx, js, tt.ref, tt.object)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("got %q (%v), want %q", got, err, tt.want)
			}
		})
	}
	// The bucket keeps objects for the journal's retention.
	obs, err := js.ObjectStore(ctx, ChangesBucket("team-a"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != DefaultMaxAge {
		t.Fatalf("bucket TTL %s, want the journal's %s", st.TTL(), DefaultMaxAge)
	}
	if err := store.PutObject(ctx, "team-a", "fix", "a/../b", "x", nil); err == nil {
		t.Fatal("a uid with '/' was accepted")
	}
}

// TestReaderReadsItsNamespaceChangesOnly: a reader of team-a reads team-a's
// recorded changes and not team-b's.
func TestReaderReadsItsNamespaceChangesOnly(t *testing.T) {
	env := authEnv(t)
	ctx := t.Context()
	store := env.pub.ChangesStore()
	for _, ref := range []SessionRef{testSession, otherTenant} {
		if err := store.PutObject(ctx, ref.Namespace, ref.Name, ref.UID, "changes.patch", []byte("patch of "+ref.Namespace)); err != nil {
			t.Fatal(err)
		}
	}
	cred, err := env.srv.MintReader("team-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := Connect(ctx, env.srv.ClientURL(), ConnectOptions{Reader: &cred})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadChanges(ctx, js, SessionRef{Namespace: testSession.Namespace, Name: testSession.Name}, "changes.patch")
	if err != nil || string(got) != "patch of team-a" {
		t.Fatalf("own namespace: %q, %v", got, err)
	}
	if got, err := ReadChanges(ctx, js, otherTenant, "changes.patch"); err == nil {
		t.Fatalf("read team-b's changes: %q", got)
	}
}
