package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestAdoptOwnerIsCheckedLikeAHello: a stream opened without an owner that
// adopts one is accepted or refused exactly as a stream whose hello carried
// it, records the same, and a refused adoption ends the stream.
func TestAdoptOwnerIsCheckedLikeAHello(t *testing.T) {
	a5 := Owner{SessionUID: "s-1", Holder: "ns-a/ao/ao-1", Epoch: 5}
	tests := []struct {
		name   string
		second Owner
		refuse bool
		want   ownerRecord // the record after both streams
	}{
		{"older epoch refused", Owner{SessionUID: "s-1", Holder: "ns-b/ao/ao-9", Epoch: 4}, true, ownerRecord{"ns-a/ao/ao-1", 5}},
		{"same epoch, another holder refused", Owner{SessionUID: "s-1", Holder: "ns-b/ao/ao-9", Epoch: 5}, true, ownerRecord{"ns-a/ao/ao-1", 5}},
		{"same holder and epoch accepted", a5, false, ownerRecord{"ns-a/ao/ao-1", 5}},
		{"newer epoch accepted and recorded", Owner{SessionUID: "s-1", Holder: "ns-b/ao/ao-9", Epoch: 6}, false, ownerRecord{"ns-b/ao/ao-9", 6}},
		{"another session is independent", Owner{SessionUID: "s-2", Holder: "ns-b/ao/ao-9", Epoch: 0}, false, ownerRecord{"ns-a/ao/ao-1", 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "owners")
			first, err := ownedClient(t, dir, a5)
			if err != nil {
				t.Fatalf("first driver: %v", err)
			}
			spare, err := ownedClient(t, dir, Owner{})
			if err != nil {
				t.Fatalf("spare stream: %v", err)
			}
			if !spare.ServerInfo().HasFeature(FeatureAdoptOwner) {
				t.Fatalf("server hello features %q do not announce %s", spare.ServerInfo().Features, FeatureAdoptOwner)
			}
			err = spare.AdoptOwner(t.Context(), tt.second)
			if tt.refuse {
				var re *RemoteError
				if !errors.Is(err, ErrNotOwner) || !errors.As(err, &re) || re.Owner == nil || *re.Owner != a5 {
					t.Fatalf("AdoptOwner = %v, want ErrNotOwner naming %+v", err, a5)
				}
				select {
				case <-spare.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the stream of a refused adoption stayed open")
				}
			} else {
				if err != nil {
					t.Fatalf("AdoptOwner = %v, want accepted", err)
				}
				if err := works(spare); err != nil {
					t.Errorf("call after adopting: %v", err)
				}
			}
			if got := record(t, dir, "s-1"); got != tt.want {
				t.Errorf("record of s-1 = %+v, want %+v", got, tt.want)
			}
			if err := works(first); (tt.want == ownerRecord{a5.Holder, a5.Epoch}) != (err == nil) {
				t.Errorf("first driver's call after the adoption = %v", err)
			}
		})
	}
}

// TestAdoptedStreamIsSuperseded: calls of an adopted stream are checked
// against the adopted owner: once a newer driver used the workspace they
// are refused.
func TestAdoptedStreamIsSuperseded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "owners")
	spare, err := ownedClient(t, dir, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if err := spare.AdoptOwner(t.Context(), Owner{SessionUID: "s-1", Holder: "a", Epoch: 1}); err != nil {
		t.Fatalf("AdoptOwner: %v", err)
	}
	if err := works(spare); err != nil {
		t.Fatalf("call of the adopted stream: %v", err)
	}
	if _, err := ownedClient(t, dir, Owner{SessionUID: "s-1", Holder: "b", Epoch: 2}); err != nil {
		t.Fatalf("newer driver: %v", err)
	}
	if err := works(spare); !errors.Is(err, ErrNotOwner) {
		t.Errorf("call of the superseded adopted stream = %v, want ErrNotOwner", err)
	}
}

// TestAdoptOwnerRefusals: adopt_owner is refused (and the stream stays as
// it was) on a stream with an owner, after an adoption, and after other
// calls; the refusals hold at the server, not only in the client.
func TestAdoptOwnerRefusals(t *testing.T) {
	o := Owner{SessionUID: "s-1", Holder: "a", Epoch: 1}
	tests := []struct {
		name  string
		hello Owner // the stream's hello owner (zero: none)
		// before runs on the stream before the refused adoption.
		before func(*Client) error
		// raw sends the adoption past the client's own checks.
		raw bool
	}{
		{"hello had an owner (client)", o, nil, false},
		{"hello had an owner (server)", o, nil, true},
		{"second adoption (client)", Owner{}, func(c *Client) error { return c.AdoptOwner(context.Background(), o) }, false},
		{"second adoption (server)", Owner{}, func(c *Client) error { return c.AdoptOwner(context.Background(), o) }, true},
		{"after a refused first adoption", Owner{}, func(c *Client) error {
			if err := c.AdoptOwner(context.Background(), Owner{SessionUID: "bad/uid", Holder: "a"}); err == nil {
				return errors.New("an invalid owner was adopted")
			}
			return c.do(context.Background(), OpAdoptOwner, Owner{SessionUID: "bad/uid", Holder: "a"}, nil, nil)
		}, false},
		{"after another call", Owner{}, works, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "owners")
			c, err := ownedClient(t, dir, tt.hello)
			if err != nil {
				t.Fatal(err)
			}
			if tt.before != nil {
				// The raw invalid adoption is a bad request; any other
				// error is a broken precondition.
				var re *RemoteError
				if err := tt.before(c); err != nil && (!errors.As(err, &re) || re.Code != CodeBadRequest) {
					t.Fatalf("before: %v", err)
				}
			}
			other := Owner{SessionUID: "s-9", Holder: "z", Epoch: 3}
			if tt.raw {
				err = c.do(t.Context(), OpAdoptOwner, other, nil, nil)
			} else {
				err = c.AdoptOwner(t.Context(), other)
			}
			if !errors.Is(err, ErrAdoptRefused) {
				t.Fatalf("adoption = %v, want ErrAdoptRefused", err)
			}
			if err := works(c); err != nil {
				t.Errorf("call after the refused adoption: %v", err)
			}
			if m, _ := filepath.Glob(filepath.Join(dir, "s-9")); len(m) != 0 {
				t.Errorf("a refused adoption wrote the owner record %v", m)
			}
		})
	}
}

// TestHelloFeaturesAreProven: the hello's proof covers every field but the
// features (as before features existed), and the features have a proof of
// their own bound to the key.
func TestHelloFeaturesAreProven(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	other := bytes.Repeat([]byte{8}, KeySize)
	base := Hello{Version: Version, MaxFrame: 1 << 20, WorkingDirectory: "/w", Platform: "linux", OSVersion: "6"}
	with := base
	with.Features = []string{FeatureAdoptOwner}
	if !bytes.Equal(helloProof(key, base), helloProof(key, with)) {
		t.Error("the hello proof changed with features: clients that predate features would refuse the hello")
	}
	if featuresProof(key, nil) != nil {
		t.Error("a proof of no features")
	}
	p := featuresProof(key, with.Features)
	if bytes.Equal(p, featuresProof(other, with.Features)) || bytes.Equal(p, featuresProof(key, []string{"other"})) {
		t.Error("the features proof does not bind the key and the features")
	}
	if !slices.Contains(with.Features, FeatureAdoptOwner) || !with.HasFeature(FeatureAdoptOwner) || base.HasFeature(FeatureAdoptOwner) {
		t.Error("HasFeature")
	}
}

// TestAdoptOwnerNeedsTheFeature: against a server whose hello does not
// announce adopt_owner (an executor that predates it) AdoptOwner fails with
// ErrAdoptUnsupported without sending the call.
func TestAdoptOwnerNeedsTheFeature(t *testing.T) {
	cr, sw := io.Pipe()
	sr, cw := io.Pipe()
	calls := make(chan *Frame, 1)
	served := make(chan struct{})
	go func() {
		defer close(served)
		f, err := ReadFrame(sr, 0)
		if err != nil {
			return
		}
		var h clientHello
		_ = json.Unmarshal(f.Body, &h)
		old := Hello{Version: Version, WorkingDirectory: "/w"}
		sw.Write(frameBytes(string(mustJSON(Frame{Kind: KindHello, Body: mustJSON(serverHello{Hello: old, Proof: helloProof(h.Key, old)})}))))
		in := &opener{key: h.Key, dir: clientToServer}
		if f, err := in.read(sr, 0); err == nil {
			calls <- f
		}
	}()
	c, err := NewClientContext(t.Context(), &duplex{Reader: cr, Writer: cw, closers: []io.Closer{cr, cw}})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	if err := c.AdoptOwner(t.Context(), Owner{SessionUID: "s-1", Holder: "a", Epoch: 1}); !errors.Is(err, ErrAdoptUnsupported) {
		t.Fatalf("AdoptOwner = %v, want ErrAdoptUnsupported", err)
	}
	c.Close() // the server's read of a next frame ends
	<-served
	select {
	case f := <-calls:
		t.Errorf("AdoptOwner sent %+v to a server without the feature", f)
	default:
	}
}
